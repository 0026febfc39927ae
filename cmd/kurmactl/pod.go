package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

func newPodCmd(c *cli) *cobra.Command {
	cmd := group("pod", "Create, list, inspect and remove pods")
	cmd.AddCommand(newPodCreateCmd(c), newPodLsCmd(c), newPodInspectCmd(c), newPodRmCmd(c), newPodCheckCmd(c))
	return cmd
}

func newPodCreateCmd(c *cli) *cobra.Command {
	var name string
	var nets []string
	var caps capFlags
	cmd := &cobra.Command{
		Use:   "create [--name NAME] [--net NAME[:K=V;...]]... [--publish HOST:CONTAINER[/tcp|udp|sctp]]... [--ip IP] [--mac MAC] [--bandwidth RATE]",
		Short: "Create a pod and attach networks to it",
		Long: `Create a pod: a network namespace with the given networks attached in order.
Without --net, every network marked default in kurmad's config is attached.
Arguments after a colon are passed to the plugin as CNI_ARGS, e.g.
--net other:IP=10.1.0.9;K=V (quote the semicolon in a shell).

--publish, --ip, --mac and --bandwidth are CNI capability arguments (the
runtimeConfig's portMappings, ips, mac and bandwidth): a network's plugins get
those its config declares. When the pod joins several networks, prefix each
value with the network it is for, as in --publish mynet:18090:80.`,
		Example: `  kurmactl pod create
  kurmactl pod create --name web --net mynet --net 'other:IP=10.1.0.9'
  kurmactl pod create --net webnet --publish 18090:80 --bandwidth 10mbit`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			// What the flags say is checked before kurmad is asked
			// anything.
			if err := caps.check(); err != nil {
				return err
			}
			cl := c.client()
			req := api.CreatePodRequest{Name: name, Networks: nets}
			if !caps.empty() {
				joined, err := podNetworks(cmd.Context(), cl, nets)
				if err != nil {
					return err
				}
				if req.RuntimeConfig, err = caps.runtimeConfig(joined); err != nil {
					return err
				}
			}
			create := cl.CreatePod
			if c.json() {
				// -o json prints the whole answer, raw results included.
				create = cl.CreatePodFull
			}
			pod, err := create(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printPod(cmd.OutOrStdout(), c, pod)
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the pod")
	// StringArray, not StringSlice: plugin arguments may contain commas.
	cmd.Flags().StringArrayVar(&nets, "net", nil, "network to attach, NAME or NAME:K=V;K2=V2 (repeatable, in order)")
	cmd.Flags().StringArrayVar(&caps.publish, "publish", nil, "publish a port, [NAME:]HOSTPORT:CONTAINERPORT[/tcp|udp|sctp] (repeatable)")
	cmd.Flags().StringArrayVar(&caps.ip, "ip", nil, "ask for this address, [NAME:]IP[/PREFIX]")
	cmd.Flags().StringArrayVar(&caps.mac, "mac", nil, "ask for this MAC address, [NAME:]MAC")
	cmd.Flags().StringArrayVar(&caps.bandwidth, "bandwidth", nil, "limit ingress and egress to [NAME:]RATE bits/s (500kbit, 10mbit, 1gbit)")
	return cmd
}

func newPodLsCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pods",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			pods, err := c.client().ListPods(cmd.Context())
			if err != nil {
				return err
			}
			if pods == nil {
				pods = []api.Pod{}
			}
			for i := range pods {
				normalizePod(&pods[i])
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), pods)
			}
			now := time.Now()
			t := newTable(cmd.OutOrStdout(), "ID", "NAME", "OWNER", "NETWORKS", "ADDRESSES", "CREATED", "STATUS")
			for _, p := range pods {
				var nets, addrs []string
				for _, a := range p.Attachments {
					nets = append(nets, a.Network+"("+a.Interface+")")
					ad, _ := resultAddresses(a)
					addrs = append(addrs, ad...)
				}
				t.row(p.ID, p.Name, podOwner(p), strings.Join(nets, ","), strings.Join(addrs, ","), age(p.Created, now), podStatus(p))
			}
			return t.flush()
		}),
	}
}

// podOwner is who a runtime's pod belongs to, as RUNTIME/CONTAINER (the
// container ID cut to 12 characters, as runtimes show it); "" for a pod
// kurmad made on its own.
func podOwner(p api.Pod) string {
	rt := p.Runtime
	if rt == nil {
		return ""
	}
	owner := rt.Owner
	if owner == "" {
		owner = "cni"
	}
	id := rt.ContainerID
	if len(id) > 12 {
		id = id[:12]
	}
	return owner + "/" + id
}

func podStatus(p api.Pod) string {
	if p.Error != "" {
		return "error: " + p.Error
	}
	if p.State == api.PodCreating || p.State == api.PodDeleting {
		return p.State
	}
	if p.Check != nil && p.Check.Degraded {
		return "degraded: " + degradedBy(p.Check)
	}
	return "ready"
}

func newPodInspectCmd(c *cli) *cobra.Command {
	var raw, calls bool
	var network string
	cmd := &cobra.Command{
		Use:   "inspect ID [--raw | --calls] [--net NAME]",
		Short: "Show a pod, its interfaces and CNI results",
		Long: `Show a pod. ID may be a unique prefix of the pod's UUID, or the pod's name.
With --raw, print instead what each network's add wrote on stdout, exactly as
the plugin wrote it, one after the other in attach order; --net NAME prints
only that network's.
With --calls, print the pod's last plugin calls (add, del, check; kurmad keeps
16 per pod, in memory), oldest first: the argv, the stdin as sent (the values
of the keys in kurmad's redact_keys read "[redacted]"), stdout, the end of
stderr, the exit, the duration and the PID of the plugin container that
served the call; --net NAME shows only that network's; -o json prints them
as a list.`,
		Example: `  kurmactl pod inspect web
  kurmactl pod inspect web --raw --net mynet
  kurmactl pod inspect web --calls`,
		Args: nonEmpty("a pod ID", cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case raw && calls:
				return fmt.Errorf("--raw and --calls show different things: give one")
			case raw && c.json():
				return fmt.Errorf("--raw prints the plugins' own bytes and takes no -o json (the pod's JSON carries them as raw_result)")
			case network != "" && !raw && !calls:
				return fmt.Errorf("--net goes with --raw or --calls")
			}
			return action(func(cmd *cobra.Command, args []string) error {
				cl := c.client()
				id, err := resolvePod(cmd.Context(), cl, args[0])
				if err != nil {
					return err
				}
				if calls {
					list, err := cl.PodCalls(cmd.Context(), id)
					if err != nil {
						return err
					}
					if c.json() {
						if list == nil {
							list = []api.PluginCall{}
						}
						return printJSON(cmd.OutOrStdout(), list)
					}
					return printCalls(cmd.OutOrStdout(), list, network)
				}
				pod, err := cl.GetPod(cmd.Context(), id)
				if err != nil {
					return err
				}
				if raw {
					return printRaw(cmd.OutOrStdout(), cmd.ErrOrStderr(), pod, network)
				}
				return printPod(cmd.OutOrStdout(), c, pod)
			})(cmd, args)
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "print each network's add output exactly as its plugin wrote it, instead of the pod")
	cmd.Flags().BoolVar(&calls, "calls", false, "print the pod's last plugin calls (argv, stdin, stdout, stderr, exit, duration, container pid)")
	cmd.Flags().StringVar(&network, "net", "", "with --raw or --calls, only this network's")
	return cmd
}

// printRaw writes the raw add output of the pod's networks (or of network
// alone) to w, byte for byte, in attach order. What it cannot show as the
// plugin wrote it is said on errw: output cut at kurmad's cap, or none kept.
func printRaw(w, errw io.Writer, pod *api.Pod, network string) error {
	var names []string
	for _, a := range pod.Attachments {
		names = append(names, a.Network)
		if network != "" && a.Network != network {
			continue
		}
		if a.RawResult == "" {
			fmt.Fprintf(errw, "kurmactl: network %s: no raw output kept (attached by a kurmad that did not keep it)\n", a.Network)
			continue
		}
		if _, err := io.WriteString(w, a.RawResult); err != nil {
			return err
		}
		if a.RawResultTruncated {
			fmt.Fprintf(errw, "kurmactl: network %s: the plugin wrote more; kurmad kept the first %d bytes\n", a.Network, len(a.RawResult))
		}
	}
	if network != "" && !slices.Contains(names, network) {
		return fmt.Errorf("pod %s is not attached to network %q (its networks: %s)", pod.ID, network, strings.Join(names, ", "))
	}
	return nil
}

func newPodRmCmd(c *cli) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm [--force] ID...",
		Aliases: []string{"delete"},
		Short:   "Detach every network of pods and remove them",
		Long: `Remove pods: each network is detached in reverse order and the netns removed.
Each ID may be a unique prefix of a pod's UUID, or a pod's name. Every pod is
attempted; the exit status is non-zero if any failed. A pod whose teardown
failed is kept with its netns and its error; kurmad retries it in the
background, and it can be removed again.

With --force, a pod is removed even when a network's del fails: kurmad runs
every del once more, then removes the netns and its record whatever they
answered. For each del that did not succeed a line on stderr names the
network: what its plugin made (the host side of the interface, the IP lease,
NAT rules) may be left.`,
		Args: nonEmpty("a pod ID", cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl := c.client()
			remove := cl.DeletePod
			if force {
				remove = func(ctx context.Context, id string) error {
					res, err := cl.RemovePod(ctx, id)
					if err != nil {
						return err
					}
					for _, l := range res.Left {
						where := "network " + l.Network
						if l.Interface != "" {
							where += " (" + l.Interface + ")"
						}
						if l.Network == "" {
							where = "its netns is not kurmad's: only the record was removed"
						}
						fmt.Fprintf(cmd.ErrOrStderr(), "kurmactl: pod %s: %s: del did not succeed, what it made may be left: %s\n",
							id, where, cleanCell(l.Error))
					}
					return nil
				}
			}
			return removeEach(cmd, c, "pod", args,
				func(ctx context.Context, arg string) (string, error) { return resolvePod(ctx, cl, arg) },
				remove)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove the pod even when a network's del fails")
	return cmd
}

// resolvePod turns a full ID, a unique ID prefix or a pod name into an ID.
// When nothing matches, arg is returned as is so that the server's
// not-found error is what the user sees.
func resolvePod(ctx context.Context, cl *api.Client, arg string) (string, error) {
	if len(arg) == 36 {
		return arg, nil
	}
	pods, err := cl.ListPods(ctx)
	if err != nil {
		return "", err
	}
	var byName, byPrefix []string
	for _, p := range pods {
		if p.Name != "" && p.Name == arg {
			byName = append(byName, p.ID)
		}
		if arg != "" && strings.HasPrefix(p.ID, arg) {
			byPrefix = append(byPrefix, p.ID)
		}
	}
	switch {
	case len(byName) == 1:
		return byName[0], nil
	case len(byName) > 1:
		return "", fmt.Errorf("%d pods are named %q: use an ID (%s)", len(byName), arg, strings.Join(byName, ", "))
	case len(byPrefix) == 1:
		return byPrefix[0], nil
	case len(byPrefix) > 1:
		slices.Sort(byPrefix)
		return "", fmt.Errorf("%q matches %d pods (%s): give more of the ID", arg, len(byPrefix), strings.Join(byPrefix, ", "))
	}
	return arg, nil
}

func normalizePod(p *api.Pod) {
	if p.Attachments == nil {
		p.Attachments = []api.Attachment{}
	}
	for i := range p.Attachments {
		if len(p.Attachments[i].Result) == 0 {
			p.Attachments[i].Result = []byte("null")
		}
	}
}

func printPod(w io.Writer, c *cli, pod *api.Pod) error {
	normalizePod(pod)
	if c.json() {
		return printJSON(w, pod)
	}
	fmt.Fprintf(w, "ID:       %s\n", pod.ID)
	fmt.Fprintf(w, "Name:     %s\n", cleanCell(pod.Name))
	fmt.Fprintf(w, "Netns:    %s\n", pod.Netns)
	if rt := pod.Runtime; rt != nil {
		fmt.Fprintf(w, "Owner:    %s (container %s, interface %s, CNI network %s, netns %s)\n",
			cleanCell(rt.Owner), rt.ContainerID, rt.Interface, cleanCell(rt.Network), rt.Netns)
		if rt.Dropped != "" {
			fmt.Fprintf(w, "Dropped:  %s by its runtime: %s; kurmad releases the pod (runs its dels)\n",
				rt.DroppedAt.Local().Format(time.RFC3339), cleanCell(rt.Dropped))
		}
	}
	fmt.Fprintf(w, "Created:  %s\n", pod.Created.Local().Format(time.RFC3339))
	if pod.Error != "" {
		fmt.Fprintf(w, "Error:    %s\n", cleanCell(pod.Error))
	}
	if pod.Check != nil {
		fmt.Fprintf(w, "Check:    %s\n", cleanCell(checkLine(pod.Check)))
	}
	fmt.Fprintln(w)
	t := newTable(w, "NETWORK", "INTERFACE", "ADDRESSES", "GATEWAY", "IMAGE")
	for _, a := range pod.Attachments {
		addrs, gws := resultAddresses(a)
		t.row(a.Network, a.Interface, strings.Join(addrs, ","), strings.Join(gws, ","), shortID(a.Image))
	}
	return t.flush()
}
