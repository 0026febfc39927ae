package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

// cli is the state shared by every command of one invocation.
type cli struct {
	socket string
	output string
	// config is kurmad's config file, read for its run_dir when neither
	// --socket nor KURMA_SOCKET names the socket.
	config string
	// socketFrom says where socket came from, for the error when nothing
	// answers there.
	socketFrom string
	// showVersion is --version.
	showVersion bool
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
	root, c := newRootCmd(stdout, stderr)
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
		if errors.Is(err, api.ErrUnreachable) {
			fmt.Fprintf(stderr, "kurmactl: the socket is %s; name kurmad's with --socket, KURMA_SOCKET, or --config (its config's run_dir)\n", c.socketFrom)
		}
		if api.IsCode(err, api.CodeInvalidConfig) {
			return 2
		}
	default:
		fmt.Fprintf(stderr, "kurmactl: %s\nRun 'kurmactl --help' for usage.\n", err)
	}
	return 1
}

func newRootCmd(stdout, stderr io.Writer) (*cobra.Command, *cli) {
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
			if c.showVersion {
				return nil // --version asks nothing of kurmad: no socket to find
			}
			if c.output != "table" && c.output != "json" {
				return fmt.Errorf("invalid --output %q: use table or json", c.output)
			}
			c.findSocket()
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&c.socket, "socket", "", "kurmad's API socket (default $KURMA_SOCKET, else <run_dir>/kurmad.sock of --config, else "+api.DefaultSocket+")")
	root.PersistentFlags().StringVar(&c.config, "config", defaultConfig, "kurmad's config, read for its run_dir when neither --socket nor KURMA_SOCKET is given")
	root.PersistentFlags().StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(newPodCmd(c), newNetCmd(c), newImageCmd(c), newReloadCmd(c), newVersionCmd(c), newWaitCmd(c), newUninstallCmd(c), newManCmd())
	// --version prints the client's alone, without asking kurmad (the
	// version command asks it too). It is our flag, not cobra's: cobra
	// prints "kurmactl version V" unless given a text/template, and a
	// template links text/template's reflection, which keeps every
	// exported method in the binary (2.6 MB more to load at each start).
	// cobra's completion command writes the shell completions.
	root.Flags().BoolVarP(&c.showVersion, "version", "v", false, "version for kurmactl")
	// cobra's completion command prints its help, and exits 0, for a
	// shell it does not know (tcsh): made now, it can refuse one.
	root.InitDefaultCompletionCmd()
	for _, sub := range root.Commands() {
		if sub.Name() == "completion" {
			sub.Args = cobra.NoArgs
			sub.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if c.showVersion {
			fmt.Fprintf(cmd.OutOrStdout(), "kurmactl %s\n", version)
			return nil
		}
		return cmd.Help()
	}
	return root, c
}

// nonEmpty is args, plus no argument empty: an empty ID would name no
// object (DELETE /v1/pods/ is no route), so it is a usage mistake, said
// before kurmad is asked.
func nonEmpty(what string, args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, in []string) error {
		if err := args(cmd, in); err != nil {
			return err
		}
		for i, a := range in {
			if strings.TrimSpace(a) == "" {
				return fmt.Errorf("argument %d of %q is empty: give %s", i+1, cmd.CommandPath(), what)
			}
		}
		return nil
	}
}

// defaultConfig is kurmad's --config default.
const defaultConfig = "/etc/kurma/kurmad.json"

// findSocket sets c.socket, as kurmad places it, and c.socketFrom: the
// --socket flag, else $KURMA_SOCKET, else <run_dir>/kurmad.sock of kurmad's
// config (--config), else the default, saying why.
func (c *cli) findSocket() {
	switch {
	case c.socket != "":
		c.socketFrom = c.socket + " (--socket)"
		return
	case os.Getenv("KURMA_SOCKET") != "":
		c.socket = os.Getenv("KURMA_SOCKET")
		c.socketFrom = c.socket + " (KURMA_SOCKET)"
		return
	}
	c.socket = api.DefaultSocket
	b, err := os.ReadFile(c.config)
	if err != nil {
		c.socketFrom = fmt.Sprintf("%s (the default: %v)", c.socket, err)
		return
	}
	var top struct {
		RunDir string `json:"run_dir"`
	}
	switch err := json.Unmarshal(bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")), &top); {
	case err != nil:
		c.socketFrom = fmt.Sprintf("%s (the default: %s is not JSON)", c.socket, c.config)
	case top.RunDir == "":
		c.socketFrom = fmt.Sprintf("%s (the default: %s sets no run_dir)", c.socket, c.config)
	default:
		c.socket = api.SocketIn(top.RunDir)
		c.socketFrom = fmt.Sprintf("%s (run_dir of %s)", c.socket, c.config)
	}
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
