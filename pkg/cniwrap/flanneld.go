package cniwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The image's main executable, for a network config with a "flannel"
// object: setup runs flanneld (kube subnet manager) with that object as
// its net-conf.json and flags, as long as the container runs. flanneld
// exiting is the main failing (kurmad restarts it with backoff); SIGTERM
// is passed on to flanneld.
const (
	// DefaultFlanneld is flanneld's path in kurma's flannel image.
	DefaultFlanneld = "/opt/flannel/flanneld"
	// EnvFlanneld overrides DefaultFlanneld.
	EnvFlanneld = "KURMA_FLANNELD"
	// NetConfFile is the net-conf.json setup writes for flanneld, in the
	// flannel dir.
	NetConfFile = "net-conf.json"
	// keyFlannel is the network config's object setup runs flanneld from.
	keyFlannel = "flannel"

	// errPluginNotAvailable is CNI STATUS's "cannot serve adds" (CNI
	// 1.1.0 spec, error 50).
	errPluginNotAvailable uint = 50

	// flanneldStopGrace is how long a stopping setup waits for flanneld
	// after SIGTERM before it kills it (kurmad's own grace is longer).
	flanneldStopGrace = 4 * time.Second
)

// backends are the flannel backends kurma's flanneld has (plugins/flannel).
var backends = []string{"vxlan", "host-gw"}

// FlannelConfig is a network config's "flannel" object:
//
//	"flannel": {
//	  "network": "10.244.0.0/16,fd00:10:244::/56",  cluster CIDRs, at most one per family (a string or a list)
//	  "backend": {"type": "vxlan"},                  flannel's Backend object (vxlan, the default, or host-gw)
//	  "mtu": 1450,                                   the vxlan device's MTU; default the interface's minus the overhead
//	  "iface": "eth0",                               flanneld --iface: name or address (a string or a list, tried in order)
//	  "ipMasq": true                                 flanneld --ip-masq (the default): masquerade traffic leaving the cluster
//	}
type FlannelConfig struct {
	Networks []netip.Prefix
	Backend  map[string]any
	MTU      int
	Iface    []string
	IPMasq   bool
}

// BackendType is the backend's type, lower case.
func (fc *FlannelConfig) BackendType() string {
	for k, v := range fc.Backend {
		if strings.EqualFold(k, "type") {
			s, _ := v.(string)
			return strings.ToLower(s)
		}
	}
	return ""
}

// vni is the vxlan backend's VNI (flannel's default 1).
func (fc *FlannelConfig) vni() int {
	for k, v := range fc.Backend {
		if strings.EqualFold(k, "vni") {
			if f, ok := v.(float64); ok {
				return int(f)
			}
		}
	}
	return 1
}

// ParseFlannelConfig reads the "flannel" object of a network config b;
// nil when there is none. Each problem names its key.
func ParseFlannelConfig(b []byte) (*FlannelConfig, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, err
	}
	raw, ok := top[keyFlannel]
	if !ok {
		return nil, nil
	}
	var in struct {
		Network json.RawMessage `json:"network"`
		Backend map[string]any  `json:"backend"`
		MTU     int             `json:"mtu"`
		Iface   json.RawMessage `json:"iface"`
		IPMasq  *bool           `json:"ipMasq"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", keyFlannel, err)
	}
	fc := &FlannelConfig{Backend: in.Backend, MTU: in.MTU, IPMasq: in.IPMasq == nil || *in.IPMasq}
	nets, err := stringOrList(in.Network)
	if err != nil {
		return nil, fmt.Errorf("%s.network: %w", keyFlannel, err)
	}
	var v4, v6 int
	for _, s := range nets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s.network: %q is not a CIDR such as 10.244.0.0/16", keyFlannel, s)
		}
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
		fc.Networks = append(fc.Networks, p.Masked())
	}
	switch {
	case len(fc.Networks) == 0:
		return nil, fmt.Errorf("%s.network: missing; write the cluster CIDR, such as \"10.244.0.0/16\"", keyFlannel)
	case v4 > 1 || v6 > 1:
		return nil, fmt.Errorf("%s.network: %q: at most one IPv4 and one IPv6 cluster CIDR", keyFlannel, nets)
	}
	if fc.Backend == nil {
		fc.Backend = map[string]any{"Type": "vxlan"}
	}
	if t := fc.BackendType(); !slices.Contains(backends, t) {
		return nil, fmt.Errorf("%s.backend.type: %q is not a backend of this image (it has %s)", keyFlannel, t, strings.Join(backends, ", "))
	}
	if fc.MTU < 0 {
		return nil, fmt.Errorf("%s.mtu: %d is negative", keyFlannel, fc.MTU)
	}
	if fc.Iface, err = stringOrList(in.Iface); err != nil {
		return nil, fmt.Errorf("%s.iface: %w", keyFlannel, err)
	}
	return fc, nil
}

// stringOrList reads a JSON string (comma-separated values: what a
// kurma-node placeholder fills in) or a list of strings; absent is none.
func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New("expected a string or a list of strings")
		}
		list = strings.Split(s, ",")
	}
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// NetConf is the net-conf.json flanneld reads (flannel's subnet.Config):
// nftables always (the image has nft, not iptables).
func (fc *FlannelConfig) NetConf() ([]byte, error) {
	conf := map[string]any{"EnableNFTables": true, "EnableIPv4": false, "EnableIPv6": false}
	for _, n := range fc.Networks {
		if n.Addr().Is4() {
			conf["Network"], conf["EnableIPv4"] = n.String(), true
		} else {
			conf["IPv6Network"], conf["EnableIPv6"] = n.String(), true
		}
	}
	backend := map[string]any{}
	for k, v := range fc.Backend {
		backend[k] = v
	}
	if fc.MTU > 0 {
		backend["MTU"] = fc.MTU
	}
	conf["Backend"] = backend
	return json.MarshalIndent(conf, "", "  ")
}

// FlanneldArgs are flanneld's flags for a net-conf.json and subnet.env in
// dir.
func (fc *FlannelConfig) FlanneldArgs(dir string) []string {
	args := []string{"--kube-subnet-mgr", "--net-config-path=" + filepath.Join(dir, NetConfFile),
		"--subnet-file=" + filepath.Join(dir, SubnetFile)}
	if fc.IPMasq {
		args = append(args, "--ip-masq")
	}
	for _, i := range fc.Iface {
		args = append(args, "--iface="+i)
	}
	return args
}

// runFlanneld is setup for a config with a "flannel" object: it writes
// net-conf.json, runs flanneld until ctx ends (then SIGTERM, and after
// flanneldStopGrace SIGKILL) or flanneld exits (exit code 1, the reason
// on stderr), and says "ready" once flanneld has written subnet.env. On a
// stop it removes what flanneld made on the node when no pod and no other
// generation of the network needs it (teardownIfLast).
func runFlanneld(ctx context.Context, env Env, list *libcni.NetworkConfigList, fc *FlannelConfig, log logrus.FieldLogger, stderr io.Writer) int {
	dir := env.flannelDir()
	conf, err := fc.NetConf()
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		// A subnet.env left from before is not this flanneld's readiness.
		if err = os.Remove(filepath.Join(dir, SubnetFile)); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, NetConfFile), conf, 0o644)
	}
	if err != nil {
		log.Errorf("flannel dir %s: %v", dir, err)
		return 1
	}
	lock, err := holdMainLock(env.CacheDir)
	if err != nil {
		log.Errorf("flannel: %v", err)
		return 1
	}
	defer lock.Close()

	path := env.Flanneld
	if path == "" {
		path = DefaultFlanneld
	}
	tail := NewTailBuffer(StderrTail)
	cmd := exec.Command(path, fc.FlanneldArgs(dir)...)
	cmd.Stdout = stderr
	cmd.Stderr = io.MultiWriter(stderr, tail)
	// flanneld must not outlive setup (kurmad's process is setup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Errorf("cannot start flanneld: %v", err)
		return 1
	}
	log.WithFields(logrus.Fields{"pid": cmd.Process.Pid, "backend": fc.BackendType(), "network": netList(fc.Networks)}).Info("flanneld started")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	go announceReady(readyCtx, filepath.Join(dir, SubnetFile), log)

	select {
	case err := <-exited:
		log.Errorf("flanneld exited (%s): %s", exitStatus(err), lastError(tail.String()))
		return 1
	case <-ctx.Done():
	}
	log.Info("stopping flanneld")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		log.WithField("status", exitStatus(err)).Info("flanneld stopped")
	case <-time.After(flanneldStopGrace):
		_ = cmd.Process.Kill()
		<-exited
		log.Warn("flanneld did not stop on SIGTERM: killed")
	}
	teardownIfLast(list, fc, lock, log)
	return 0
}

func netList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// announceReady logs "ready" once flanneld has written subnet.env (the
// node's lease taken, its traffic rules in place).
func announceReady(ctx context.Context, path string, log logrus.FieldLogger) {
	for {
		if env, err := ReadSubnetEnv(path); err == nil {
			log.WithFields(logrus.Fields{"subnet": netList(env.Subnets), "mtu": env.MTU, "ipMasq": env.IPMasq}).Info("ready: flanneld wrote subnet.env")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exitStatus says how flanneld ended ("exit status 1", "signal: terminated").
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// lastError is the last error line flanneld logged (klog's "E1127 ..."),
// else its last line: the reason kurmad shows for the failed network.
func lastError(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); len(l) > 1 && (l[0] == 'E' || l[0] == 'F') && l[1] >= '0' && l[1] <= '9' {
			return l
		}
	}
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return "no output"
}

// mainLockFile is held shared by every running flannel main of a network
// (in the network's plugin state dir, which all its generations share):
// one that stops tears down only when it can take it exclusively.
const mainLockFile = "flannel.lock"

func holdMainLock(stateDir string) (*os.File, error) {
	if stateDir == "" {
		stateDir = DefaultCacheDir
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, mainLockFile), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// teardownIfLast removes flanneld's vxlan links (and with them its routes
// to the other nodes), its host-gw routes and its nftables tables, when
// this was the network's last running flannel main (lock) and no pod
// holds an address on it (host-local's leases): kurma being removed from
// the node. A kurmad restart or a new generation while pods run keeps
// them, so pods keep reaching other nodes meanwhile; the next flanneld
// takes them over.
func teardownIfLast(list *libcni.NetworkConfigList, fc *FlannelConfig, lock *os.File, log logrus.FieldLogger) {
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		log.Info("another generation of this network runs flanneld: leaving flannel's links and rules")
		return
	}
	if n := leases(list); n > 0 {
		log.WithField("leases", n).Info("pods still hold addresses: leaving flannel's links and rules")
		return
	}
	var errs []error
	if fc.BackendType() == "vxlan" {
		for _, name := range []string{fmt.Sprintf("flannel.%d", fc.vni()), fmt.Sprintf("flannel-v6.%d", fc.vni())} {
			if l, err := netlink.LinkByName(name); err == nil {
				if err := netlink.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("delete link %s: %w", name, err))
				}
			}
		}
	}
	errs = append(errs, deleteClusterRoutes(fc.Networks)...)
	for _, t := range [][2]string{{"ip", "flannel-ipv4"}, {"ip6", "flannel-ipv6"}} {
		out, err := exec.Command("nft", "delete", "table", t[0], t[1]).CombinedOutput()
		if err != nil && !bytes.Contains(out, []byte("No such file or directory")) {
			errs = append(errs, fmt.Errorf("nft delete table %s %s: %v: %s", t[0], t[1], err, bytes.TrimSpace(out)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.WithError(err).Warn("removing flannel's links and rules")
		return
	}
	log.Info("no pod left and no other flanneld: removed flannel's links, routes and rules")
}

// deleteClusterRoutes deletes the routes to other nodes' subnets that
// host-gw made: a gateway, a destination inside a cluster network.
func deleteClusterRoutes(networks []netip.Prefix) []error {
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, fam)
		if err != nil {
			return append(errs, err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Gw == nil {
				continue
			}
			dst, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			for _, n := range networks {
				if n.Contains(dst.Unmap()) {
					if err := netlink.RouteDel(&r); err != nil {
						errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
					}
					break
				}
			}
		}
	}
	return errs
}

// hostLocalDataDir is host-local's default data dir.
const hostLocalDataDir = "/var/lib/cni/networks"

// leases counts the addresses host-local holds for the network's pods,
// from the "flannel" plugins' IPAM data dirs.
func leases(list *libcni.NetworkConfigList) int {
	n := 0
	for _, p := range list.Plugins {
		if p.Network.Type != FlannelType {
			continue
		}
		var fp flannelPlugin
		_ = json.Unmarshal(p.Bytes, &fp)
		dir, _ := fp.IPAM["dataDir"].(string)
		if dir == "" {
			dir = hostLocalDataDir
		}
		entries, _ := os.ReadDir(filepath.Join(dir, list.Name))
		for _, e := range entries {
			if _, err := netip.ParseAddr(e.Name()); err == nil {
				n++
			}
		}
	}
	return n
}
