package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/uninstall"
)

func newUninstallCmd(c *cli) *cobra.Command {
	var yes, force bool
	cmd := &cobra.Command{
		Use:   "uninstall --yes [--force]",
		Short: "Remove kurma's pods, stop kurmad and remove what kurma made on the host",
		Long: `Remove kurma from this host, in the order that leaves nothing behind:

 1. every pod, deleted through its networks' plugins as pod rm does (a
    runtime's pods too: their containers keep running without kurma's
    networks); a pod whose del fails stops the uninstall, unless --force;
 2. kurmad, the process answering on the socket: under systemd its unit is
    disabled; it gets SIGUSR2, which stops its plugin containers too (a
    SIGTERM would leave them for the next kurmad); kurmactl waits for it
    to exit (its plugin containers stopped, its mounts gone);
 3. the bridges of its networks' bridge plugins (the plugin leaves them by
    design), each only when it is a bridge with no port and no address
    outside its network's subnets: one the host has for something else is
    kept, saying why;
 4. the nft tables of the plugins (bridge's ipMasq, portmap) in which no
    container's rule is left, and those the policy network's daemons left
    when they stopped;
 5. kurmad's state and run dirs (journal, images, the networks' state).

Each removal, and what is kept and why, is one line. Without --yes nothing
is removed: what would be is printed. The files an install copied (the
binaries, the config, a systemd unit) are left for you to remove.`,
		Example: `  kurmactl uninstall          # what would be removed
  kurmactl uninstall --yes`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			err := uninstall.Run(cmd.Context(), uninstall.Options{Client: c.client(), Socket: c.socket,
				Force: force, DryRun: !yes, Out: cmd.OutOrStdout()})
			if err == nil && !yes {
				return errors.New("nothing was removed: run kurmactl uninstall --yes to remove it")
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "remove it (without it, say what would be removed)")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove a pod even when a network's del fails (pod rm --force)")
	return cmd
}
