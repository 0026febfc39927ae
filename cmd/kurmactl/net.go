package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

func newNetCmd(c *cli) *cobra.Command {
	cmd := group("net", "Show the configured networks", "network")
	cmd.AddCommand(&cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List networks and the state of their plugins",
		Long: `List the networks in kurmad's config with the state of each one's plugin in
the networking pod: starting, running, failed (with the reason) or stopped.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			nets, err := c.client().Networks(cmd.Context())
			if err != nil {
				return err
			}
			if nets == nil {
				nets = []api.Network{}
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), nets)
			}
			t := newTable(cmd.OutOrStdout(), "NAME", "STATE", "DEFAULT", "RESTARTS", "PID", "IMAGE", "REASON")
			for _, n := range nets {
				def, pid := "", ""
				if n.Default {
					def = "yes"
				}
				if n.Pid > 0 {
					pid = strconv.Itoa(n.Pid)
				}
				t.row(n.Name, n.State, def, strconv.Itoa(n.Restarts), pid, shortID(n.Image), n.Reason)
			}
			return t.flush()
		}),
	})
	return cmd
}
