package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes kurmactl's man pages, one per command, generated from
// the commands themselves (make man; README's install).
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write kurmactl's man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "KURMACTL", Section: "1", Source: "kurma " + version, Manual: "kurma"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages written to %s\n", args[0])
			return nil
		}),
	}
}
