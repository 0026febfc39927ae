package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

// versionOutput is what version -o json prints.
type versionOutput struct {
	Client struct {
		Version string `json:"version"`
	} `json:"client"`
	Server *api.Info `json:"server,omitempty"`
}

func newVersionCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the client's and kurmad's versions",
		Args:  cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			var out versionOutput
			out.Client.Version = version
			info, err := c.client().Info(cmd.Context())
			w := cmd.OutOrStdout()
			if c.json() {
				if err == nil {
					out.Server = &info
				}
				if perr := printJSON(w, out); perr != nil {
					return perr
				}
				return err
			}
			fmt.Fprintf(w, "Client:     %s\n", version)
			if err != nil {
				return err
			}
			server := info.Version
			if info.Commit != "" {
				server += " (" + info.Commit + ")"
			}
			fmt.Fprintf(w, "Server:     %s\n", server)
			fmt.Fprintf(w, "Socket:     %s\n", info.Socket)
			fmt.Fprintf(w, "State dir:  %s\n", info.StateDir)
			fmt.Fprintf(w, "Run dir:    %s\n", info.RunDir)
			fmt.Fprintf(w, "Networks:   %d\n", info.Networks)
			fmt.Fprintf(w, "Pods:       %d\n", info.Pods)
			if info.Teardowns > 0 {
				fmt.Fprintf(w, "Teardowns:  %d (pods whose dels wait for their plugin or are retried)\n", info.Teardowns)
			}
			if len(info.GCWaiting) > 0 {
				fmt.Fprintf(w, "GC waits:   %s (for a plugin container of the network to run)\n", strings.Join(info.GCWaiting, ", "))
			}
			if info.Uptime != "" {
				fmt.Fprintf(w, "Uptime:     %s\n", info.Uptime)
			}
			return nil
		}),
	}
}
