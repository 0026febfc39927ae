package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

// cli is the state shared by every command of one invocation.
type cli struct {
	socket string
	output string
}

func (c *cli) client() *api.Client { return api.NewClient(c.socket) }

func (c *cli) json() bool { return c.output == "json" }

// runError marks an error from a command's action (an API or transport
// error) as opposed to a usage error, which gets a hint to --help.
type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

// errReported is returned when the command already printed its errors.
var errReported = errors.New("failed")

// action adapts a command body so that its errors are reported as such.
func action(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			return runError{err}
		}
		return nil
	}
}

// run executes kurmactl with args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var re runError
	switch {
	case errors.Is(err, errReported):
	case errors.As(err, &re):
		fmt.Fprintf(stderr, "kurmactl: %s\n", re.err)
		if api.IsCode(err, api.CodeInvalidConfig) {
			return 2
		}
	default:
		fmt.Fprintf(stderr, "kurmactl: %s\nRun 'kurmactl --help' for usage.\n", err)
	}
	return 1
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cli{}
	root := &cobra.Command{
		Use:   "kurmactl",
		Short: "Control kurmad: pods, their networks, and the networks' plugin images",
		Long: `kurmactl talks to kurmad over its unix socket (root only).

Pods are network namespaces with the networks they ask for attached by name.
Every command prints a table by default and JSON with -o json.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if c.output != "table" && c.output != "json" {
				return fmt.Errorf("invalid --output %q: use table or json", c.output)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	defSocket := api.DefaultSocket
	if s := os.Getenv("KURMA_SOCKET"); s != "" {
		defSocket = s
	}
	root.PersistentFlags().StringVar(&c.socket, "socket", defSocket, "kurmad API socket (env KURMA_SOCKET)")
	root.PersistentFlags().StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(newPodCmd(c), newNetCmd(c), newImageCmd(c), newReloadCmd(c), newVersionCmd(c))
	return root
}

// group returns a command that only holds subcommands: given no
// subcommand it shows help, given an unknown one it fails.
func group(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Aliases: aliases,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
}

// removeEach resolves and removes every argument in turn (pod rm, image rm):
// each removed ID is printed, each failure goes to stderr as
// "kurmactl: <kind> <arg>: <message>" and the others are still attempted;
// the exit status is non-zero when any failed. With -o json the removed IDs
// are printed as one list. A cancelled context (Ctrl-C) stops the loop.
func removeEach(cmd *cobra.Command, c *cli, kind string, args []string,
	resolve func(context.Context, string) (string, error),
	remove func(context.Context, string) error) error {
	ctx := cmd.Context()
	removed := []string{}
	failed := false
	for _, arg := range args {
		id, err := resolve(ctx, arg)
		if err == nil {
			err = remove(ctx, id)
		}
		if err != nil {
			failed = true
			fmt.Fprintf(cmd.ErrOrStderr(), "kurmactl: %s %s: %s\n", kind, arg, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		removed = append(removed, id)
		if !c.json() {
			fmt.Fprintln(cmd.OutOrStdout(), id)
		}
	}
	if c.json() {
		if err := printJSON(cmd.OutOrStdout(), removed); err != nil {
			return runError{err}
		}
	}
	if failed {
		return errReported
	}
	return nil
}
