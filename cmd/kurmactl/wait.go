package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/api"
)

// newWaitCmd waits for kurmad's API, for a kurmad started without
// systemd (whose Type=notify unit does the same wait).
func newWaitCmd(c *cli) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait [--timeout D]",
		Short: "Wait until kurmad's API answers (a kurmad started without systemd)",
		Args:  cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for {
				_, err := c.client().Info(ctx)
				if err == nil || !errors.Is(err, api.ErrUnreachable) {
					return err
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("no answer within %s: %w", timeout, err)
				case <-time.After(100 * time.Millisecond):
				}
			}
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait")
	return cmd
}
