package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

// newWaitCmd waits until kurmad is ready for pods: its API serves and
// the networks pods will ask for run. A kurmad started without systemd
// needs it; the systemd unit runs it too (examples/kurmad.service).
func newWaitCmd(c *cli) *cobra.Command {
	var timeout time.Duration
	var networks []string
	cmd := &cobra.Command{
		Use:   "wait [--timeout D] [--networks A,B]",
		Short: "Wait until kurmad serves and its default networks run",
		Long: `Wait until kurmad is ready for pods: its API answers, and then the networks
run: the default ones (those a pod created without --net joins) and, when
one of them is policed ("network_policy"), the policy network; or, when
none is default, every network of the config; --networks names others, and
--networks '' waits for the API alone. What it waits for is said on stderr as
it changes. A network that cannot run (its image cannot be fetched, its
container fails) is waited for until --timeout, then named with its state and
reason; the exit status is then 1.`,
		Example: `  kurmactl wait
  kurmactl wait --networks webnet --timeout 5m`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			w := &waiter{cl: c.client(), socket: c.socket, out: cmd.ErrOrStderr(), timeout: timeout}
			if cmd.Flags().Changed("networks") {
				w.names = slices.DeleteFunc(networks, func(n string) bool { return strings.TrimSpace(n) == "" })
				w.named = true
			}
			if err := w.api(ctx); err != nil {
				return err
			}
			return w.networks(ctx)
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait")
	cmd.Flags().StringSliceVar(&networks, "networks", nil, "the networks to wait for (default: the default networks)")
	return cmd
}

// waiter is one kurmactl wait.
type waiter struct {
	cl      *api.Client
	socket  string
	out     io.Writer // where what it waits for is said
	timeout time.Duration
	names   []string // the networks to wait for, once known
	named   bool     // names came from --networks
	said    string   // what it said last
	pending string   // the networks not running yet, as last seen
}

// say writes msg unless it is what was said last.
func (w *waiter) say(msg string) {
	if msg != w.said {
		fmt.Fprintln(w.out, msg)
		w.said = msg
	}
}

// api waits until kurmad's API answers. A socket kurmad has yet to make
// is waited for (it is polled: there is nothing to be told by); one that
// refuses the caller, or a path that is no socket, is an error at once.
func (w *waiter) api(ctx context.Context) error {
	w.say(fmt.Sprintf("waiting for kurmad's API at %s", w.socket))
	for {
		_, err := w.cl.Info(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, api.ErrUnreachable) || errors.Is(err, fs.ErrPermission) || notSocket(w.socket) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kurmad did not answer within %s: %w", w.timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// notSocket reports whether path is something other than a socket.
func notSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() != fs.ModeSocket
}

// networks waits until each network to wait for has a running generation,
// following their states (GET /v1/networks?wait=R) rather than polling.
func (w *waiter) networks(ctx context.Context) error {
	if w.named && len(w.names) == 0 {
		w.say("ready: kurmad serves")
		return nil
	}
	rev := ""
	for {
		gens, r, err := w.cl.WaitNetworks(ctx, rev)
		if err != nil {
			if ctx.Err() != nil && w.pending != "" {
				return fmt.Errorf("not ready within %s: %s", w.timeout, w.pending)
			}
			if errors.Is(err, api.ErrUnreachable) {
				// kurmad restarted (systemd's Restart=): wait for it again.
				if err := w.api(ctx); err != nil {
					return err
				}
				rev = ""
				continue
			}
			return err
		}
		rev = r
		if w.names == nil {
			w.names = waitFor(gens)
			if len(w.names) == 0 {
				w.say("ready: kurmad serves (its config has no network)")
				return nil
			}
		}
		if w.named {
			if unknown := slices.DeleteFunc(slices.Clone(w.names), func(n string) bool { return hasNetwork(gens, n) }); len(unknown) > 0 {
				return fmt.Errorf("kurmad has no network %s (its networks: %s)", strings.Join(unknown, ", "), strings.Join(networkNames(gens), ", "))
			}
		}
		if w.pending = notRunning(gens, w.names); w.pending == "" {
			w.say("ready: kurmad serves and " + plural(w.names, "network %s runs", "networks %s run"))
			return nil
		}
		w.say("waiting for " + w.pending)
	}
}

// waitFor is the networks to wait for when none was named: the default
// ones, and the policy network when one of those is policed (a pod
// joins it unpoliced until the policy network runs); else every network
// of the config (those with a generation that is not retiring).
func waitFor(gens []api.Generation) []string {
	if defs := defaultNetworks(gens); len(defs) > 0 {
		policed := slices.ContainsFunc(gens, func(g api.Generation) bool { return g.Default && g.NetworkPolicy })
		for _, g := range gens {
			if policed && g.Role == api.RolePolicy && g.State != api.StateRetiring && g.State != api.StateStopped && !slices.Contains(defs, g.Network) {
				defs = append(defs, g.Network)
			}
		}
		return defs
	}
	var all []string
	for _, g := range gens {
		if g.State != api.StateRetiring && g.State != api.StateStopped && !slices.Contains(all, g.Network) {
			all = append(all, g.Network)
		}
	}
	return all
}

// plural is one or many, with names in it.
func plural(names []string, one, many string) string {
	if len(names) == 1 {
		return fmt.Sprintf(one, names[0])
	}
	return fmt.Sprintf(many, strings.Join(names, ", "))
}

func hasNetwork(gens []api.Generation, name string) bool {
	return slices.ContainsFunc(gens, func(g api.Generation) bool { return g.Network == name })
}

func networkNames(gens []api.Generation) []string {
	var out []string
	for _, g := range gens {
		if !slices.Contains(out, g.Network) {
			out = append(out, g.Network)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// notRunning says which of names have no running generation in gens, each
// with its newest generation's state and reason ("mynet (fetching)"); ""
// when every one runs.
func notRunning(gens []api.Generation, names []string) string {
	var out []string
	for _, name := range names {
		var newest *api.Generation
		running := false
		for i, g := range gens {
			if g.Network != name {
				continue
			}
			running = running || g.State == api.StateRunning
			if newest == nil || g.Generation > newest.Generation {
				newest = &gens[i]
			}
		}
		switch {
		case running:
		case newest == nil:
			out = append(out, name+" (gone from kurmad's config)")
		case newest.Reason != "":
			out = append(out, fmt.Sprintf("%s (%s: %s)", name, newest.State, cleanCell(newest.Reason)))
		default:
			out = append(out, fmt.Sprintf("%s (%s)", name, newest.State))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "network " + strings.Join(out, ", network ")
}
