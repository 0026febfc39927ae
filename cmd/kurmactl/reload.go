package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

func newReloadCmd(c *cli) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "reload [--dry-run]",
		Short: "Make kurmad read its config file again and apply it",
		Long: `Make kurmad read its config file again (as SIGHUP does) and apply the
difference without a restart: new networks start, networks gone from the file
retire (they stop once their pods are gone), a network whose image or plugin
config changed gets a new generation beside the old one (new pods use it once
it runs; the old one retires), and unchanged networks are not touched.

Networks are compared by what their entries mean, not how they are written:
re-indenting the file, reordering keys or rewriting an escape changes nothing.
Each replaced or updated network's line says which keys changed (a path into
the entry, as ipam.subnet or plugins[0].bridge).

With --dry-run, kurmad reads and checks the file and prints what a reload would
do, applying nothing.

A file with any problem changes nothing: every problem is printed and the exit
status is 2.`,
		Example: `  kurmactl reload --dry-run
  kurmactl reload`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			reload := c.client().Reload
			if dryRun {
				reload = c.client().PlanReload
			}
			res, err := reload(cmd.Context())
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), res)
			}
			return printReload(cmd, res)
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what a reload would do, applying nothing")
	return cmd
}

// printReload prints a reload's NETWORK and CHANGE, what changed in each
// replaced or updated network, and, for a dry run, that nothing was
// applied.
func printReload(cmd *cobra.Command, res *api.ReloadResult) error {
	t := newTable(cmd.OutOrStdout(), "NETWORK", "CHANGE")
	for _, g := range []struct {
		change string
		names  []string
	}{
		{"added", res.Added},
		{"replaced%s: a new generation starts; the old one retires once it runs", res.Replaced},
		{"retired: it stops once its pods are gone", res.Retired},
		{"updated%s", res.Updated},
		{"unchanged", res.Unchanged},
	} {
		for _, n := range g.names {
			change := g.change
			if strings.Contains(change, "%s") {
				keys := ""
				if ks := res.Changes[n]; len(ks) > 0 {
					keys = " (" + strings.Join(ks, ", ") + ")"
				}
				change = strings.Replace(change, "%s", keys, 1)
			}
			t.row(n, change)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if res.DryRun {
		_, err := cmd.OutOrStdout().Write([]byte("dry run: nothing was applied; run kurmactl reload to apply it\n"))
		return err
	}
	return nil
}
