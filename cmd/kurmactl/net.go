package main

import (
	"io"
	"strconv"
	"strings"
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
it served), failed (with the reason, and when it is tried again) or stopped.
ROLE is attach (pods attach to it) or policy (its image enforces policy; pods
never attach to it); POLICY is, for the policy network, the networks it
polices, and for a network that opted in (network_policy), the policy network
that polices it.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			gens, err := c.client().Networks(cmd.Context())
			if err != nil {
				return err
			}
			return printGenerations(cmd.OutOrStdout(), c, gens)
		}),
	}, &cobra.Command{
		Use:   "retry NAME",
		Short: "Try a failed network again now",
		Long: `Try a network's failed generations again now instead of at their next attempt:
an image fetch that failed is retried, a plugin container waiting to restart
restarts. Prints the network's generations.`,
		Args: nonEmpty("a network name", cobra.ExactArgs(1)),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			gens, err := c.client().RetryNetwork(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printGenerations(cmd.OutOrStdout(), c, gens)
		}),
	})
	return cmd
}

// printGenerations prints generations as net ls does, one row each.
func printGenerations(w io.Writer, c *cli, gens []api.Generation) error {
	if gens == nil {
		gens = []api.Generation{}
	}
	if c.json() {
		return printJSON(w, gens)
	}
	now := time.Now()
	enforcer := "" // the policy network
	for _, g := range gens {
		if g.Role == api.RolePolicy {
			enforcer = g.Network
			break
		}
	}
	t := newTable(w, "NETWORK", "GEN", "STATE", "DEFAULT", "ROLE", "POLICY", "RESTARTS", "PID", "IMAGE", "REASON")
	for _, g := range gens {
		role, policy := g.Role, ""
		if role == "" {
			role = api.RoleAttach // a kurmad from before roles
		}
		switch {
		case g.Role == api.RolePolicy:
			policy = strings.Join(g.PolicyNetworks, ",")
		case g.NetworkPolicy && enforcer != "":
			policy = "by " + enforcer
		case g.NetworkPolicy:
			policy = "yes"
		}
		def, pid := "", ""
		if g.Default {
			def = "yes"
		}
		if g.Pid > 0 {
			pid = strconv.Itoa(g.Pid)
		}
		reason := g.Reason
		if g.State == api.StateFetching && !g.FetchStarted.IsZero() {
			reason = joinReason(fetched(g, now), reason)
		}
		if g.Trespass != "" {
			reason = joinReason(reason, "trespass at "+g.Trespass)
		}
		if !g.NextRetry.IsZero() {
			reason += " (next attempt in " + g.NextRetry.Sub(now).Round(time.Second).String() + ")"
		}
		t.row(g.Network, strconv.Itoa(g.Generation), g.State, def, role, policy, strconv.Itoa(g.Restarts), pid, shortID(g.Image), reason)
	}
	return t.flush()
}

// fetched says how far a fetching generation's image came: "1.5 MiB of
// 4.0 MiB in 3s" (the total when known).
func fetched(g api.Generation, now time.Time) string {
	got := humanBytes(g.FetchedBytes)
	if g.FetchTotalBytes > 0 {
		got += " of " + humanBytes(g.FetchTotalBytes)
	}
	return "fetched " + got + " in " + now.Sub(g.FetchStarted).Round(time.Second).String()
}

// joinReason is a, then b after "; " when there is one.
func joinReason(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}
