// Command cnitest is a CNI plugin for kurma's end-to-end tests whose
// behaviour comes from the "behavior" key of its network config:
//
//	ok                succeed with an empty result (no interface, no IP), or,
//	                  chained after another plugin in a conflist, with the
//	                  prevResult it was given
//	fail              ADD returns a CNI error (code 100) and exits 1
//	try-again         ADD returns CNI error 11 ("try again later") the first
//	                  "tries" times for a container ID (counted in a file in
//	                  its state dir), then behaves as ok; without "tries",
//	                  every time
//	hang              ADD starts a background child that keeps stdout open
//	                  (same process group), marks it started in its state
//	                  dir, then sleeps forever; the child's command line
//	                  names the pod's netns path, so a test finds (and
//	                  kills) the children of its own pods only
//	hang-detached     like hang, but the child is in its own session, so only
//	                  its hold on stdout ties it to the call
//	crash-after-veth  ADD creates a veth pair whose host end is "kte" + the
//	                  first 8 characters of the container ID and whose peer
//	                  is made in the netns, then exits 2 with no result
//	veth-then-hang    ADD creates that veth, then sleeps forever: the veth
//	                  appearing tells a test that this ADD is running
//	wait              ADD marks itself started in its state dir
//	                  (cnitest-wait-started), waits until the test makes
//	                  cnitest-wait-release there, then behaves as ok: a
//	                  create a test holds, and lets finish, when it wants
//
// With "extraLinks": ["eth0", ...] in its config, an ADD that succeeds
// ("ok") first makes a link of each name in the netns (bridge devices,
// which need no other link), not in its result: links kurma did not name,
// as a plugin or a runtime may leave them. They go with the netns.
//
// A pod may override the behaviour for its own ADD with the argument
// BEHAVIOR (`--net name:BEHAVIOR=ok`), read from the config's args.cni or
// from CNI_ARGS, so one network can hang for one pod and serve the next.
//
// "stateDir": DIR in its config is where it keeps and reads its marks: a
// directory the test made, never a host dir it did not (in a kurma plugin
// container, /var/lib/cni, which is the network's state dir
// <state_dir>/networks/<name> of the test's kurmad on the host). It has no
// default: a behaviour that needs it fails without it, and DEL then has no
// fail file to look for.
//
// With "notReadyFile": PATH in its config, STATUS (CNI 1.1.0 configs) fails
// with error 50 and the file's first line as its message while that file
// exists, and succeeds otherwise: a test makes the network not ready and
// ready again by writing and removing the file (in the network's state
// dir).
//
// DEL succeeds, removing that host veth when present, unless the file
// cnitest-fail-del exists in its stateDir (a test makes it in the network's
// state dir): then it fails. VERSION is answered by skel, so cni-wrapper's
// setup check passes for every behaviour.
// It must be static (CGO_ENABLED=0): it runs inside the plugin image.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// hangChildEnv marks the re-executed background child of "hang".
const hangChildEnv = "CNITEST_HANG_CHILD"

// hangChildMark is written in the state dir once "hang" started its child.
const hangChildMark = "cnitest-hang-child-started"

type netConf struct {
	types.NetConf
	StateDir     string   `json:"stateDir"`
	Behavior     string   `json:"behavior"`
	Tries        int      `json:"tries"`
	ExtraLinks   []string `json:"extraLinks"`
	NotReadyFile string   `json:"notReadyFile"`
	Args         struct {
		CNI map[string]any `json:"cni"`
	} `json:"args"`
}

// behavior is the pod's BEHAVIOR argument when given, else the config's.
func (c *netConf) behavior(cniArgs string) string {
	if v, ok := c.Args.CNI["BEHAVIOR"].(string); ok && v != "" {
		return v
	}
	for _, kv := range strings.Split(cniArgs, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "BEHAVIOR" && v != "" {
			return v
		}
	}
	return c.Behavior
}

// state is the path of the mark name in the state dir; without a state
// dir, an error naming the behaviour that needs one.
func (c *netConf) state(name, behavior string) (string, error) {
	if c.StateDir == "" {
		return "", fmt.Errorf("cnitest: behavior %s needs \"stateDir\" in the config (a directory of the test's own)", behavior)
	}
	return filepath.Join(c.StateDir, name), nil
}

func main() {
	if os.Getenv(hangChildEnv) != "" {
		// The background child: hold the inherited stdout and never exit.
		for {
			time.Sleep(time.Hour)
		}
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: func(*skel.CmdArgs) error { return nil }, Status: cmdStatus},
		version.All, "cnitest: kurma e2e test plugin")
}

func parse(args *skel.CmdArgs) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(args.StdinData, &c); err != nil {
		return nil, fmt.Errorf("cnitest: config: %w", err)
	}
	return &c, nil
}

// HostVeth is the host end name crash-after-veth uses for a container ID.
func hostVeth(containerID string) string {
	id := containerID
	if len(id) > 8 {
		id = id[:8]
	}
	return "kte" + id
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	behavior := c.behavior(args.Args)
	switch behavior {
	case "", "ok":
		return succeed(args, c)
	case "fail":
		return types.NewError(100, "cnitest: told to fail", "behavior fail for "+args.ContainerID)
	case "try-again":
		if again, err := tryAgain(c, args.ContainerID); err != nil || again {
			if err != nil {
				return err
			}
			return types.NewError(types.ErrTryAgainLater, "cnitest: busy, try again later", "behavior try-again for "+args.ContainerID)
		}
		return succeed(args, c)
	case "hang", "hang-detached":
		mark, err := c.state(hangChildMark, behavior)
		if err != nil {
			return err
		}
		child := exec.Command("/proc/self/exe", "cnitest-hang-child", args.Netns, args.ContainerID)
		child.Env = append(os.Environ(), hangChildEnv+"=1")
		child.Stdout = os.Stdout
		child.Stderr = os.Stderr
		if behavior == "hang-detached" {
			child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := child.Start(); err != nil {
			return fmt.Errorf("cnitest: start child: %w", err)
		}
		// Proof for the test that the child ran, so its "no child left"
		// check cannot pass for a child that never started.
		if err := os.WriteFile(mark, nil, 0o600); err != nil {
			// Not left behind by a failed add.
			_ = child.Process.Kill()
			_ = child.Wait()
			return fmt.Errorf("cnitest: mark the child started: %w", err)
		}
		for {
			time.Sleep(time.Hour)
		}
	case "wait":
		started, err := c.state("cnitest-wait-started", behavior)
		if err != nil {
			return err
		}
		if err := os.WriteFile(started, nil, 0o600); err != nil {
			return fmt.Errorf("cnitest: mark the add started: %w", err)
		}
		release, _ := c.state("cnitest-wait-release", behavior)
		for {
			if _, err := os.Stat(release); err == nil {
				return succeed(args, c)
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "veth-then-hang":
		if err := makeVeth(args); err != nil {
			return err
		}
		for {
			time.Sleep(time.Hour)
		}
	case "crash-after-veth":
		if err := makeVeth(args); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "cnitest: crashing after creating the veth")
		os.Exit(2)
	}
	return fmt.Errorf("cnitest: unknown behavior %q", behavior)
}

// succeed makes the extra links asked for and prints the chain's
// prevResult, or an empty result.
func succeed(args *skel.CmdArgs, c *netConf) error {
	if err := makeLinks(args.Netns, c.ExtraLinks); err != nil {
		return err
	}
	if c.RawPrevResult != nil {
		if err := version.ParsePrevResult(&c.NetConf); err != nil {
			return fmt.Errorf("cnitest: prevResult: %w", err)
		}
		return types.PrintResult(c.PrevResult, c.CNIVersion)
	}
	return types.PrintResult(&current.Result{CNIVersion: current.ImplementedSpecVersion}, c.CNIVersion)
}

// tryAgain counts an add of containerID and says whether it is one of the
// first tries (every one when tries is 0).
func tryAgain(c *netConf, containerID string) (bool, error) {
	tries := c.Tries
	if tries <= 0 {
		return true, nil
	}
	path, err := c.state("cnitest-tries-"+containerID, "try-again with tries")
	if err != nil {
		return false, err
	}
	n := 0
	if b, err := os.ReadFile(path); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if n >= tries {
		return false, os.Remove(path)
	}
	return true, os.WriteFile(path, []byte(strconv.Itoa(n+1)), 0o600)
}

func makeVeth(args *skel.CmdArgs) error {
	ns, err := netns.GetFromPath(args.Netns)
	if err != nil {
		return fmt.Errorf("cnitest: netns %s: %w", args.Netns, err)
	}
	defer ns.Close()
	name := hostVeth(args.ContainerID)
	// The peer is made in the pod's netns in the same request: a kill at
	// any instant leaves either no veth or a pair that goes with the netns,
	// never a pair whose both ends sit on the host (no del could name it:
	// the add that made it was never journaled with an interface).
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p", PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("cnitest: add veth %s: %w", name, err)
	}
	return nil
}

// makeLinks makes a bridge device of each name in the netns at path.
func makeLinks(path string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("cnitest: netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("cnitest: netns %s: %w", path, err)
	}
	defer h.Close()
	for _, n := range names {
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n}}); err != nil {
			return fmt.Errorf("cnitest: add link %s: %w", n, err)
		}
	}
	return nil
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	if c.StateDir != "" {
		if _, err := os.Stat(filepath.Join(c.StateDir, "cnitest-fail-del")); err == nil {
			return types.NewError(100, "cnitest: del told to fail", "cnitest-fail-del exists")
		}
		_ = os.Remove(filepath.Join(c.StateDir, "cnitest-tries-"+args.ContainerID))
	}
	link, err := netlink.LinkByName(hostVeth(args.ContainerID))
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("cnitest: del: %w", err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("cnitest: del %s: %w", link.Attrs().Name, err)
	}
	return nil
}

// errPluginNotAvailable is CNI 1.1.0's STATUS error "the plugin is not
// available (cannot serve ADD)"; libcni's types have no name for it.
const errPluginNotAvailable = 50

// cmdStatus fails while the config's notReadyFile exists.
func cmdStatus(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil || c.NotReadyFile == "" {
		return err
	}
	b, err := os.ReadFile(c.NotReadyFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if err != nil {
		msg = err.Error()
	}
	return types.NewError(errPluginNotAvailable, msg, "cnitest: "+c.NotReadyFile+" exists")
}
