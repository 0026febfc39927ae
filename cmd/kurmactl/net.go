package main

import (
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

func newNetCmd(c *cli) *cobra.Command {
	cmd := group("net", "Show the configured networks", "network")
	cmd.AddCommand(&cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List networks and the state of their plugins",
		Long: `List the networks in kurmad's config with the state of each one's plugin
container in the plugin host, one line per generation: fetching (its image),
starting, running, retiring (an older generation kept for the dels of the pods
it served), failed (with the reason, and when it is tried again) or stopped.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			nets, err := c.client().Networks(cmd.Context())
			if err != nil {
				return err
			}
			return printNetworks(cmd.OutOrStdout(), c, nets)
		}),
	}, &cobra.Command{
		Use:   "retry NAME",
		Short: "Try a failed network again now",
		Long: `Try a network's failed generations again now instead of at their next attempt:
an image fetch that failed is retried, a plugin container waiting to restart
restarts. Prints the network's generations.`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			nets, err := c.client().RetryNetwork(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printNetworks(cmd.OutOrStdout(), c, nets)
		}),
	})
	return cmd
}

// printNetworks prints networks as net ls does.
func printNetworks(w io.Writer, c *cli, nets []api.Generation) error {
	if nets == nil {
		nets = []api.Generation{}
	}
	if c.json() {
		return printJSON(w, nets)
	}
	now := time.Now()
	t := newTable(w, "NETWORK", "GEN", "STATE", "DEFAULT", "RESTARTS", "PID", "IMAGE", "REASON")
	for _, n := range nets {
		def, pid := "", ""
		if n.Default {
			def = "yes"
		}
		if n.Pid > 0 {
			pid = strconv.Itoa(n.Pid)
		}
		reason := n.Reason
		if !n.NextRetry.IsZero() {
			reason += " (next attempt in " + n.NextRetry.Sub(now).Round(time.Second).String() + ")"
		}
		t.row(n.Network, strconv.Itoa(n.Generation), n.State, def, strconv.Itoa(n.Restarts), pid, shortID(n.Image), reason)
	}
	return t.flush()
}
