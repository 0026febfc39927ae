// Package uninstall removes kurma from a host (kurmactl uninstall): the
// pods first, each through its networks' plugins as any delete is, then
// kurmad, then what kurma made on the host and only that: the bridges of
// its networks' bridge plugins that it can prove are theirs, the nft
// tables of its plugins that no container's rule is left in, those its
// policy network's daemons left, its state and run dirs. It says what it removed, and what it kept and why. The
// binaries and files an install copied are the operator's to remove.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kurma-project/kurma/pkg/api"
)

// Options are one uninstall's.
type Options struct {
	// Client reaches the kurmad to uninstall: its pods are deleted through
	// it, and it says its config, state and run dirs.
	Client *api.Client
	// Socket is the client's socket: kurmad's process is its peer there.
	Socket string
	// Force removes a pod whose del fails anyway (DELETE ?force=true),
	// as kurmactl pod rm --force does; without it such a pod stops the
	// uninstall before anything else is removed.
	Force bool
	// DryRun says what would be removed, removing nothing.
	DryRun bool
	// Out gets a line per thing removed, kept or (DryRun) to remove.
	Out io.Writer
}

// ErrPodsLeft: a pod could not be deleted, so nothing else was removed
// (its plugins' state, in the state dir, is what a later delete needs).
var ErrPodsLeft = errors.New("pods left")

// Run uninstalls kurma as Options say.
func Run(ctx context.Context, o Options) error {
	info, err := o.Client.Info(ctx)
	if err != nil {
		return err
	}
	// What the host holds of kurma's is read while kurmad runs: its config
	// names the bridges.
	nets, policy, err := readNetworks(info.Config)
	if err != nil {
		return err
	}
	u := &run{o: o}
	if err := u.pods(ctx); err != nil {
		return err
	}
	if err := u.stop(ctx, info); err != nil {
		return err
	}
	u.bridges(nets)
	u.tables()
	u.netpolTables(policy)
	u.dirs(info.StateDir, info.RunDir)
	if o.DryRun {
		return nil
	}
	u.say("left as they are: the files the install copied (kurmad, kurma-agent, kurmactl, kurma-cni, the config %s, a systemd unit): remove them if you want", info.Config)
	return u.err
}

// run is one uninstall under way.
type run struct {
	o   Options
	err error // the first thing that could not be removed
}

// say writes a line.
func (u *run) say(format string, args ...any) {
	fmt.Fprintf(u.o.Out, format+"\n", args...)
}

// removed says that what went (or, in a dry run, would go).
func (u *run) removed(format string, args ...any) {
	verb := "removed"
	if u.o.DryRun {
		verb = "would remove"
	}
	u.say(verb+" "+format, args...)
}

// kept says what stays and why.
func (u *run) kept(format string, args ...any) {
	u.say("kept "+format, args...)
}

// failed says what could not be removed; Run then fails.
func (u *run) failed(err error) {
	u.say("could not remove %v", err)
	if u.err == nil {
		u.err = err
	}
}

// pods deletes every pod kurmad holds, each through its networks' plugins
// (runtime pods too: their containers keep running, without kurma's
// networks).
func (u *run) pods(ctx context.Context) error {
	pods, err := u.o.Client.ListPods(ctx)
	if err != nil {
		return err
	}
	var left []string
	for _, p := range pods {
		what := "pod " + p.ID
		if p.Name != "" {
			what += " (" + p.Name + ")"
		}
		if p.Runtime != nil {
			what += fmt.Sprintf(", %s's container %s, which keeps running without kurma's networks", p.Runtime.Owner, p.Runtime.ContainerID)
		}
		if u.o.DryRun {
			u.removed("%s, through its networks' plugins", what)
			continue
		}
		if err := u.o.Client.DeletePod(ctx, p.ID); err != nil {
			if !u.o.Force {
				u.say("could not delete %s: %v", what, err)
				left = append(left, p.ID)
				continue
			}
			res, ferr := u.o.Client.RemovePod(ctx, p.ID)
			if ferr != nil {
				u.say("could not delete %s, even by force: %v", what, ferr)
				left = append(left, p.ID)
				continue
			}
			for _, l := range res.Left {
				u.say("%s: network %s: its del did not succeed, what it made may be left: %s", what, l.Network, l.Error)
			}
		}
		u.removed("%s, through its networks' plugins", what)
	}
	if len(left) > 0 {
		return fmt.Errorf("%w: %s could not be deleted, so nothing else was removed: see why with kurmactl pod ls, or uninstall with --force to remove them anyway", ErrPodsLeft, strings.Join(left, ", "))
	}
	return nil
}

// dirs removes the state and run dirs, once nothing is mounted under
// them (kurmad, stopped, unmounted its state filesystems and netns dir).
func (u *run) dirs(dirs ...string) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		u.failed(err)
		return
	}
	for _, d := range dirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if under := mountedUnder(string(mounts), d); len(under) > 0 && !u.o.DryRun {
			u.kept("%s: still mounted there: %s", d, strings.Join(under, ", "))
			continue
		}
		if !u.o.DryRun {
			if err := os.RemoveAll(d); err != nil {
				u.failed(err)
				continue
			}
		}
		u.removed("%s", d)
	}
}

// mountedUnder lists the mount points of mountinfo at or under dir.
func mountedUnder(mountinfo, dir string) []string {
	var out []string
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}
