package k8stest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DirectFlannel is an N-node cluster's overlay run the usual way, on the
// nodes themselves: flanneld (kube subnet manager, vxlan) as each node's
// daemon, and the CNI plugins it would delegate to (bridge and host-local
// on the node's pod CIDRs, flannel's MTU, no masquerade) installed as the
// node's own conflist. It is what kurma's flannel plugin image does, less
// kurma: the anchor of `make k8s-bench`'s cross-node rows.
type DirectFlannel struct {
	// Flanneld is the flanneld binary (make flanneld).
	Flanneld string
	// PluginDir holds the CNI plugins installed on the nodes (bridge,
	// host-local, portmap, bandwidth: images/out/bin, those of kurma's
	// images).
	PluginDir string
	// NetConf is flanneld's net-conf.json.
	NetConf string
	// Bridge is the nodes' pod bridge.
	Bridge string
}

// NewDirectFlannel is the direct side of cluster c as kurma's flannel
// manifest runs flannel (its net-conf.json, bridge, plugins), from kurma's
// repository at repo (plugins/flannel/out/flanneld, images/out/bin).
func NewDirectFlannel(c *Cluster, repo string) DirectFlannel {
	// As kurma's flannel image writes it (pkg/cniwrap, FlannelConfig.NetConf).
	conf := map[string]any{"Network": ClusterCIDR, "EnableIPv4": true, "EnableIPv6": false, "EnableNFTables": true,
		"Backend": map[string]any{"type": "vxlan"}}
	if c.opts.DualStack {
		conf["EnableIPv6"] = true
		conf["IPv6Network"] = ClusterCIDRv6
	}
	b, _ := json.Marshal(conf)
	return DirectFlannel{
		Flanneld:  filepath.Join(repo, "plugins/flannel/out/flanneld"),
		PluginDir: filepath.Join(repo, "images/out/bin"),
		NetConf:   string(b),
		Bridge:    "kurma0", // the manifest's
	}
}

// DirectConflist is the direct side's conflist on a node.
const DirectConflist = "/etc/cni/net.d/10-flannel.conflist"

// directNetwork is its CNI network name (host-local's lease directory).
const directNetwork = "flannel-direct"

// Subnet is what flanneld wrote in a node's subnet.env.
type Subnet struct {
	Network, Subnet, IPv6Network, IPv6Subnet string
	MTU                                      int
}

// ReadSubnetEnv reads flanneld's subnet.env at path.
func ReadSubnetEnv(path string) (Subnet, error) {
	f, err := os.Open(path)
	if err != nil {
		return Subnet{}, err
	}
	defer f.Close()
	var s Subnet
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "FLANNEL_NETWORK":
			s.Network = v
		case "FLANNEL_SUBNET":
			s.Subnet = v
		case "FLANNEL_IPV6_NETWORK":
			s.IPv6Network = v
		case "FLANNEL_IPV6_SUBNET":
			s.IPv6Subnet = v
		case "FLANNEL_MTU":
			s.MTU, _ = strconv.Atoi(v)
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if s.MTU == 0 || (s.Subnet == "" && s.IPv6Subnet == "") {
		return s, fmt.Errorf("%s: no subnet or MTU", path)
	}
	return s, nil
}

// Start runs flanneld on every node, waits for each node's subnet.env,
// and installs the plugins and the conflist on it.
func (d DirectFlannel) Start(ctx context.Context, c *Cluster) error {
	if !c.MultiNode() {
		return errors.New("the direct flannel side needs an N-node cluster")
	}
	for _, n := range c.Nodes {
		conf := filepath.Join(n.Dir, "net-conf.json")
		if err := os.WriteFile(conf, []byte(d.NetConf), 0o644); err != nil {
			return err
		}
		// The admin's credentials: the anchor's RBAC is not what is measured.
		if err := n.RunDaemon("flanneld", []string{"NODE_NAME=" + n.Name}, d.Flanneld,
			"--kube-subnet-mgr", "--kubeconfig-file="+c.Kubeconfig, "--iface=eth0", "--ip-masq",
			"--net-config-path="+conf, "--subnet-file=/run/flannel/subnet.env"); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		var sn Subnet
		if err := c.waitFor(ctx, time.Minute, "flanneld's subnet.env on "+n.Name, n.daemonName("flanneld"), func() (err error) {
			sn, err = ReadSubnetEnv(n.Path("/run/flannel/subnet.env"))
			return err
		}); err != nil {
			return err
		}
		for _, p := range []string{"bridge", "host-local", "portmap", "bandwidth"} {
			b, err := os.ReadFile(filepath.Join(d.PluginDir, p))
			if err != nil {
				return fmt.Errorf("%w (make images)", err)
			}
			if err := os.WriteFile(n.Path("/opt/cni/bin/"+p), b, 0o755); err != nil {
				return err
			}
		}
		list := d.conflist(sn)
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		tmp := n.Path(DirectConflist + ".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, n.Path(DirectConflist)); err != nil {
			return err
		}
	}
	return nil
}

// conflist is what kurma's flannel network expands its plugins to on a
// node (pkg/cniwrap, ExpandFlannel, with the manifest's delegate):
// bridge with flanneld's MTU, no masquerade (flanneld's --ip-masq), the
// node's default gateway; host-local on the node's subnets with a route
// to each cluster network; portmap and bandwidth.
func (d DirectFlannel) conflist(sn Subnet) map[string]any {
	var ranges, routes []any
	for _, s := range []string{sn.Subnet, sn.IPv6Subnet} {
		if s == "" {
			continue
		}
		_, n, _ := net.ParseCIDR(s)
		ranges = append(ranges, []any{map[string]any{"subnet": n.String()}})
	}
	for _, s := range []string{sn.Network, sn.IPv6Network} {
		if s != "" {
			routes = append(routes, map[string]any{"dst": s})
		}
	}
	return map[string]any{"cniVersion": "1.0.0", "name": directNetwork, "plugins": []any{
		map[string]any{"type": "bridge", "bridge": d.Bridge, "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true, "mtu": sn.MTU,
			"ipam": map[string]any{"type": "host-local", "ranges": ranges, "routes": routes}},
		map[string]any{"type": "portmap", "backend": "nftables", "capabilities": map[string]any{"portMappings": true}},
		map[string]any{"type": "bandwidth", "capabilities": map[string]any{"bandwidth": true}},
	}}
}

// Stop stops flanneld on every node and removes what the direct side
// left there: the conflist, the vxlan links and the bridge, flanneld's
// tables and files, host-local's leases. The pods attached through it
// must be gone first.
func (d DirectFlannel) Stop(ctx context.Context, c *Cluster) error {
	var errs []error
	for _, n := range c.Nodes {
		if err := os.Remove(n.Path(DirectConflist)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		if err := n.StopDaemon("flanneld", 10*time.Second); err != nil {
			errs = append(errs, err)
		}
		for _, l := range []string{"flannel.1", "flannel-v6.1", d.Bridge} {
			if _, err := os.Stat(n.Path("/sys/class/net/" + l)); err == nil {
				if _, err := n.Run(ctx, "ip", "link", "del", l); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, t := range []string{"ip flannel-ipv4", "ip6 flannel-ipv6"} {
			f := strings.Fields(t)
			if _, err := n.Run(ctx, "nft", "list", "table", f[0], f[1]); err == nil {
				if _, err := n.Run(ctx, "nft", "delete", "table", f[0], f[1]); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, p := range []string{"/run/flannel", "/var/lib/cni/networks/" + directNetwork} {
			if err := os.RemoveAll(n.Path(p)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
