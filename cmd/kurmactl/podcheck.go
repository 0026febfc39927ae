package main

import (
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

func newPodCheckCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "check ID...",
		Short: "Run the pods' plugin checks (CNI CHECK) and show the outcome",
		Long: `Check pods: each network's /opt/network/check runs against the result its add
gave. A pod whose plugin says its attachment is broken (a veth or a NAT rule
removed by hand, say) becomes degraded, and ready again once every check
passes. Each ID may be a unique prefix of a pod's UUID, or a pod's name.
OUTCOME is passed, failed (the pod is degraded), unknown (no answer: the
network is not running, the call timed out) or skipped (the image has no
check, or the config's CNI version has none). The exit status is 1 when a
pod is degraded or could not be checked.`,
		Example: `  kurmactl pod check web`,
		Args:    nonEmpty("a pod ID", cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl := c.client()
			ctx := cmd.Context()
			var pods []api.Pod
			bad := false
			t := newTable(cmd.OutOrStdout(), "POD", "NETWORK", "INTERFACE", "OUTCOME", "MESSAGE")
			for _, arg := range args {
				id, err := resolvePod(ctx, cl, arg)
				var p *api.Pod
				if err == nil {
					p, err = cl.CheckPod(ctx, id)
				}
				if err != nil {
					bad = true
					fmt.Fprintf(cmd.ErrOrStderr(), "kurmactl: pod %s: %s\n", arg, err)
					if ctx.Err() != nil {
						break
					}
					continue
				}
				pods = append(pods, *p)
				if p.Check == nil {
					continue
				}
				bad = bad || p.Check.Degraded
				for _, n := range p.Check.Attachments {
					t.row(p.ID, n.Network, n.Interface, n.Outcome, n.Message)
				}
			}
			if c.json() {
				if pods == nil {
					pods = []api.Pod{}
				}
				for i := range pods {
					normalizePod(&pods[i])
				}
				if err := printJSON(cmd.OutOrStdout(), pods); err != nil {
					return runError{err}
				}
			} else if err := t.flush(); err != nil {
				return runError{err}
			}
			if bad {
				return errReported
			}
			return nil
		},
	}
}

// checkLine is pod inspect's summary of the pod's last check.
func checkLine(c *api.PodCheck) string {
	when := c.Time.Local().Format(time.RFC3339)
	if !c.Degraded {
		return "passed at " + when
	}
	return "degraded at " + when + " (" + degradedBy(c) + ")"
}

// degradedBy says why a degraded pod is: the networks whose check failed,
// or, when it stays degraded because a network that failed before gave no
// verdict this time, those.
func degradedBy(c *api.PodCheck) string {
	var failed, unknown []string
	for _, n := range c.Attachments {
		switch n.Outcome {
		case api.CheckFailed:
			failed = append(failed, n.Network+": "+n.Message)
		case api.CheckUnknown:
			unknown = append(unknown, n.Network+": no verdict since it failed: "+n.Message)
		}
	}
	if len(failed) == 0 {
		failed = unknown
	}
	return strings.Join(failed, "; ")
}

// printCalls writes the pod's plugin calls (those of network alone when
// set), oldest first, each as a header line and its argv, stdin, stdout
// and stderr exactly as kept.
func printCalls(w io.Writer, calls []api.PluginCall, network string) error {
	n := 0
	for _, c := range calls {
		if network != "" && c.Network != network {
			continue
		}
		if n > 0 {
			fmt.Fprintln(w)
		}
		n++
		status := fmt.Sprintf("exit %d", c.ExitCode)
		if c.Signal != "" {
			status = "killed by " + c.Signal
		}
		mode := ""
		if c.InProcess {
			mode = ", in-process"
		}
		fmt.Fprintf(w, "== %s %s at %s: %s in %.1f ms (container pid %d%s)\n", c.Network, path.Base(c.Path),
			c.Started.Local().Format(time.RFC3339Nano), status, c.DurationMS, c.Pid, mode)
		if c.Error != "" {
			fmt.Fprintf(w, "error: %s\n", cleanCell(c.Error))
		}
		fmt.Fprintf(w, "argv: %s\n", strings.Join(append([]string{c.Path}, c.Args...), " "))
		section(w, "stdin", c.Stdin, c.StdinTruncated, "cut at 64 KiB")
		section(w, "stdout", c.Stdout, c.StdoutTruncated, "cut at 64 KiB")
		section(w, "stderr", c.Stderr, c.StderrTruncated, "its last 4 KiB")
	}
	if n == 0 {
		if network != "" {
			fmt.Fprintf(w, "no call of network %s kept for this pod\n", network)
		} else {
			fmt.Fprintln(w, "no call kept for this pod (kurmad keeps them in memory: a restart forgets them)")
		}
	}
	return nil
}

// section writes one labelled block; an empty one says so on its label's
// line.
func section(w io.Writer, label, text string, cut bool, how string) {
	note := ""
	if cut {
		note = " (" + how + ")"
	}
	if text == "" {
		fmt.Fprintf(w, "%s: (empty)%s\n", label, note)
		return
	}
	fmt.Fprintf(w, "%s:%s\n%s", label, note, text)
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(w)
	}
}
