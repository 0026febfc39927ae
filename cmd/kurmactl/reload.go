package main

import (
	"github.com/spf13/cobra"
)

func newReloadCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Make kurmad read its config file again and apply it",
		Long: `Make kurmad read its config file again (as SIGHUP does) and apply the
difference without a restart: new networks start, networks gone from the file
retire (they stop once their pods are gone), a network whose image or plugin
config changed gets a new generation beside the old one (new pods use it once
it runs; the old one retires), and unchanged networks are not touched.

A file with any problem changes nothing: every problem is printed and the exit
status is 2.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			res, err := c.client().Reload(cmd.Context())
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), res)
			}
			t := newTable(cmd.OutOrStdout(), "NETWORK", "CHANGE")
			for _, g := range []struct {
				change string
				names  []string
			}{
				{"added", res.Added},
				{"replaced: a new generation starts; the old one retires once it runs", res.Replaced},
				{"retired: it stops once its pods are gone", res.Retired},
				{"updated", res.Updated},
				{"unchanged", res.Unchanged},
			} {
				for _, n := range g.names {
					t.row(n, g.change)
				}
			}
			return t.flush()
		}),
	}
}
