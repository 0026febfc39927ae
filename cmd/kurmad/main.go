// Command kurmad hosts container networking plugins shipped as images: it
// starts one container per configured network in the privileged networking
// pod and attaches pods to those networks on request over its API. The
// daemon itself is package daemon; this is its process: flags, the logger,
// signals, config errors and profiling hooks. Its plugin containers are
// started by kurma-init, beside it (pkg/networkpod/initd).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/kurma-project/kurma/pkg/daemon"
)

// init keeps the main thread for the main goroutine, for good. kurmad's
// goroutines that lock their thread and move it into a pod's network
// namespace or a call's mount view end with their thread (pkg/netnsfile,
// pkg/networkpod); Go cannot end the main thread, so it would park it
// there instead: /proc/self/ns/* and /proc/self/mountinfo (the main
// thread's) would name that namespace ever after, and a pod's netns would
// be held alive by it. kurma-agent had exactly that bug (an adopted
// container's views mounted over the host's netns dir).
func init() { runtime.LockOSThread() }

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newCommand().Execute(); err != nil {
		// A config's problems are each on a line of their own, so an
		// operator fixes them all at once.
		fmt.Fprintf(os.Stderr, "kurmad: %v\n", err)
		var ce *daemon.ConfigError
		if errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type flags struct {
	config   string
	stateDir string
	runDir   string
	socket   string
	logLevel string
	logJSON  bool
	// stopPlugins: SIGTERM stops the plugin containers too (see Run).
	stopPlugins bool
}

func newCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:           "kurmad",
		Short:         "Host container networking plugins shipped as images",
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := logrus.ParseLevel(f.logLevel)
			if err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := newLogger(level, f.logJSON, os.Stderr)
			opts := daemon.Options{
				ConfigPath: f.config,
				Socket:     f.socket,
				Version:    version,
				Logger:     log.WithField("component", "kurmad"),
				// SIGTERM leaves the plugin containers running for the
				// next kurmad (a restart, an upgrade) unless told.
				StopPlugins: f.stopPlugins,
			}
			if cmd.Flags().Changed("state-dir") {
				opts.StateDir = f.stateDir
			}
			if cmd.Flags().Changed("run-dir") {
				opts.RunDir = f.runDir
			}
			cfg, err := daemon.LoadConfig(f.config, opts.StateDir, opts.RunDir)
			if err != nil {
				return err
			}
			opts.Config = cfg
			d, err := daemon.New(opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// SIGUSR2: stop, and stop the plugin containers too (an
			// uninstall decided while kurmad runs: kurma-node's).
			usr2 := make(chan os.Signal, 1)
			signal.Notify(usr2, syscall.SIGUSR2)
			defer signal.Stop(usr2)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				select {
				case <-usr2:
					log.Info("SIGUSR2: stopping, the plugin containers too")
					d.StopPluginsOnExit()
					cancel()
				case <-ctx.Done():
				}
			}()
			// Caught from now on: SIGHUP's default action would end kurmad.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go reloadOnHangup(ctx, hup, d, log)
			go notifyReady(ctx, d, log)
			return d.Run(ctx)
		},
	}
	cmd.SetVersionTemplate("kurmad {{.Version}}\n")
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "/etc/kurma/kurmad.json", "boot config file (JSON)")
	fl.StringVar(&f.stateDir, "state-dir", "", "override the config's state_dir")
	fl.StringVar(&f.runDir, "run-dir", "", "override the config's run_dir")
	fl.StringVar(&f.socket, "socket", "", "API socket (default <run_dir>/kurmad.sock)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	fl.BoolVar(&f.stopPlugins, "stop-plugins", false, "on SIGTERM or SIGINT stop the plugin containers too (an uninstall); without it they run on for the next kurmad to adopt (SIGUSR2 stops them either way)")
	return cmd
}

// reloadOnHangup reloads the config on every SIGHUP from hup (systemctl
// reload, a closed terminal), as `kurmactl reload` does, until ctx ends;
// the outcome is logged. A SIGHUP before the daemon serves waits for it.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, d *daemon.Daemon, log logrus.FieldLogger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if err := d.WaitServing(ctx); err != nil {
			return
		}
		_, err := d.Reload(ctx)
		// Reload logs what it applied; a refusal is logged here, every
		// problem on a line of its own.
		var ce *daemon.ConfigError
		switch {
		case errors.As(err, &ce):
			log.WithField("config", ce.Path).Errorf("SIGHUP: config not reloaded: %d problem(s); nothing changed", len(ce.Err.Problems))
			for _, p := range ce.Err.Problems {
				log.WithField("config", ce.Path).Error("config problem: " + p.String())
			}
		case err != nil:
			log.WithError(err).Error("SIGHUP: config not reloaded")
		}
	}
}

// newLogger is kurmad's logger, writing to out; the standard logger, which
// libcontainer forwards its container inits' log lines to, writes there
// too, as kurmad's own lines, but for their fatal and panic levels (see
// demoteInit).
func newLogger(level logrus.Level, json bool, out io.Writer) *logrus.Logger {
	var f logrus.Formatter = &logrus.TextFormatter{FullTimestamp: true}
	if json {
		f = &logrus.JSONFormatter{}
	}
	log := logrus.New()
	log.SetLevel(level)
	log.SetOutput(out)
	log.SetFormatter(f)
	std := logrus.StandardLogger()
	std.SetLevel(level)
	std.SetOutput(out)
	std.SetFormatter(demoteInit{f})
	return log
}

// demoteInit formats a fatal or panic entry of the standard logger as an
// error: libcontainer forwards the log of a container's init (nsexec's
// "level":"fatal" when a plugin container fails to start) at the level the
// init gave, which is fatal to that start, not to kurmad, which goes on
// (and restarts the container). The init's level stays in init_level.
type demoteInit struct{ logrus.Formatter }

func (d demoteInit) Format(e *logrus.Entry) ([]byte, error) {
	if e.Level > logrus.FatalLevel {
		return d.Formatter.Format(e)
	}
	c := e.WithField("init_level", e.Level.String())
	c.Level, c.Message, c.Time = logrus.ErrorLevel, e.Message, e.Time
	return d.Formatter.Format(c)
}

// notifyReady tells systemd (the unit's Type=notify) that kurmad has
// started once its API serves, so `systemctl start kurmad` returns when
// kurmactl and kurma-cni can reach it; without $NOTIFY_SOCKET it does
// nothing.
func notifyReady(ctx context.Context, d *daemon.Daemon, log logrus.FieldLogger) {
	if d.WaitServing(ctx) != nil {
		return
	}
	if _, err := sdnotify.SdNotify(false, sdnotify.SdNotifyReady); err != nil {
		log.WithError(err).Warn("cannot tell systemd that kurmad is ready ($NOTIFY_SOCKET)")
	}
}
