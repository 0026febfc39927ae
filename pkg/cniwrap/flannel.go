package cniwrap

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// Flannel: in kurma's flannel image the network's main executable runs
// flanneld (flanneld.go), and a plugin of type "flannel" in the network's
// config stands for what flannel's own CNI plugin would delegate to: the
// wrapper replaces it, before libcni sees the config, with a bridge (or
// the delegate's type) and host-local on the node's subnets flanneld wrote
// to subnet.env, with flanneld's MTU, and ipMasq off when flanneld
// masquerades (--ip-masq). The plugin entry takes flannel's CNI keys:
//
//	{"type": "flannel", "delegate": {"bridge": "kurma0", "isDefaultGateway": true}, "ipam": {...}}
//
// del, check and gc's deletes use the config the add was cached with
// (libcni's cache), so they need no subnet.env; add and status read it,
// and fail until flanneld has written it, as does the CNI GC of a 1.1.0
// config.
const (
	// FlannelType is the plugin type the wrapper resolves itself.
	FlannelType = "flannel"
	// DefaultFlannelDir holds flanneld's subnet.env and net-conf.json in
	// the plugin container (flanneld's default /run/flannel).
	DefaultFlannelDir = "/run/flannel"
	// EnvFlannelDir overrides DefaultFlannelDir (tests run the wrapper
	// outside a container).
	EnvFlannelDir = "KURMA_FLANNEL_DIR"
	// SubnetFile is flanneld's subnet.env, in the flannel dir.
	SubnetFile = "subnet.env"
)

// ErrFlannelNotReady means flanneld has not written subnet.env (yet): an
// add of a flannel network cannot be served.
var ErrFlannelNotReady = errors.New("flannel is not ready")

// SubnetEnv is what flanneld writes to subnet.env: the cluster networks,
// this node's subnets (its pod CIDRs, with the kube subnet manager), the
// MTU pods get and whether flanneld masquerades traffic leaving the
// cluster.
type SubnetEnv struct {
	Networks []netip.Prefix // FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK
	Subnets  []netip.Prefix // FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET (masked: 10.244.1.0/24)
	MTU      int            // FLANNEL_MTU
	IPMasq   bool           // FLANNEL_IPMASQ
}

// ReadSubnetEnv reads flanneld's subnet.env at path.
func ReadSubnetEnv(path string) (*SubnetEnv, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := &SubnetEnv{}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: line %q is not KEY=VALUE", path, line)
		}
		vals[k] = v
	}
	prefixes := func(key string, masked bool) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for _, s := range strings.Split(vals[key], ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, key, err)
			}
			if masked {
				p = p.Masked()
			}
			out = append(out, p)
		}
		return out, nil
	}
	for _, k := range []string{"FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK"} {
		ps, err := prefixes(k, false)
		if err != nil {
			return nil, err
		}
		env.Networks = append(env.Networks, ps...)
	}
	for _, k := range []string{"FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET"} {
		ps, err := prefixes(k, true)
		if err != nil {
			return nil, err
		}
		env.Subnets = append(env.Subnets, ps...)
	}
	if len(env.Subnets) == 0 {
		return nil, fmt.Errorf("%s: no FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET", path)
	}
	if env.MTU, err = strconv.Atoi(vals["FLANNEL_MTU"]); err != nil || env.MTU <= 0 {
		return nil, fmt.Errorf("%s: FLANNEL_MTU %q is not a positive number", path, vals["FLANNEL_MTU"])
	}
	if env.IPMasq, err = strconv.ParseBool(vals["FLANNEL_IPMASQ"]); err != nil {
		return nil, fmt.Errorf("%s: FLANNEL_IPMASQ %q is not true or false", path, vals["FLANNEL_IPMASQ"])
	}
	return env, nil
}

// hasFlannel reports whether list has a plugin of FlannelType.
func hasFlannel(list *libcni.NetworkConfigList) bool {
	return slices.ContainsFunc(list.Plugins, func(p *libcni.PluginConfig) bool { return p.Network.Type == FlannelType })
}

// flannelPlugin is the part of a "flannel" plugin entry the wrapper reads
// (flannel's CNI plugin's keys).
type flannelPlugin struct {
	Delegate map[string]any `json:"delegate"`
	IPAM     map[string]any `json:"ipam"`
}

// delegateTypes are the plugin and IPAM types a "flannel" entry stands
// for: its delegate's type (bridge when it names none) and its IPAM's
// (host-local).
func delegateTypes(p *libcni.PluginConfig) (string, string) {
	var fp flannelPlugin
	_ = json.Unmarshal(p.Bytes, &fp)
	t, _ := fp.Delegate["type"].(string)
	if t == "" {
		t = "bridge"
	}
	it, _ := fp.IPAM["type"].(string)
	if it == "" {
		it = "host-local"
	}
	return t, it
}

// ExpandFlannel returns list with every plugin of FlannelType replaced by
// its delegate, configured from env as flannel's CNI plugin configures
// it: the delegate's own keys win; type defaults to bridge (with
// isGateway), ipMasq to the opposite of flanneld's, mtu to flanneld's;
// the IPAM (host-local unless the entry's "ipam" names another) gets one
// range per node subnet and a route to each cluster network beside the
// routes it has. The result's Bytes are the expanded list, which is what
// libcni caches for del and check.
func ExpandFlannel(list *libcni.NetworkConfigList, env *SubnetEnv) (*libcni.NetworkConfigList, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(list.Bytes, &top); err != nil {
		return nil, err
	}
	plugins := make([]json.RawMessage, 0, len(list.Plugins))
	for i, p := range list.Plugins {
		if p.Network.Type != FlannelType {
			plugins = append(plugins, p.Bytes)
			continue
		}
		b, err := flannelDelegate(p.Bytes, env)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d] (type %s): %w", i, FlannelType, err)
		}
		plugins = append(plugins, b)
	}
	var err error
	if top["plugins"], err = json.Marshal(plugins); err != nil {
		return nil, err
	}
	b, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	out, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return nil, err
	}
	out.DisableCheck, out.DisableGC = list.DisableCheck, list.DisableGC
	return out, nil
}

// flannelDelegate is the delegate config of one "flannel" plugin entry.
func flannelDelegate(entry []byte, env *SubnetEnv) ([]byte, error) {
	var fp flannelPlugin
	if err := json.Unmarshal(entry, &fp); err != nil {
		return nil, err
	}
	d := map[string]any{}
	for k, v := range fp.Delegate {
		d[k] = v
	}
	if _, ok := d["type"]; !ok {
		d["type"] = "bridge"
	}
	if _, ok := d["ipMasq"]; !ok {
		d["ipMasq"] = !env.IPMasq
	}
	if _, ok := d["mtu"]; !ok {
		d["mtu"] = env.MTU
	}
	if d["type"] == "bridge" {
		if _, ok := d["isGateway"]; !ok {
			d["isGateway"] = true
		}
	}
	ipam := map[string]any{}
	for k, v := range fp.IPAM {
		ipam[k] = v
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = "host-local"
	}
	var ranges [][]map[string]any
	for _, s := range env.Subnets {
		ranges = append(ranges, []map[string]any{{"subnet": s.String()}})
	}
	ipam["ranges"] = ranges
	routes, _ := ipam["routes"].([]any)
	for _, n := range env.Networks {
		routes = append(routes, map[string]any{"dst": n.String()})
	}
	if len(routes) > 0 {
		ipam["routes"] = routes
	}
	d["ipam"] = ipam
	return json.Marshal(d)
}

// flannelDir is where flanneld's files are in this environment.
func (e Env) flannelDir() string {
	if e.FlannelDir != "" {
		return e.FlannelDir
	}
	return DefaultFlannelDir
}

// resolveFlannel replaces the "flannel" plugins of the call's config by
// their delegates from subnet.env, for add and status; del and check
// resolve per attachment (attachmentList), gc as it can
// (resolveFlannelForGC). code is the CNI error code of
// a flanneld that is not ready yet.
func (c *call) resolveFlannel(code uint) int {
	if !hasFlannel(c.list) {
		return 0
	}
	list, err := c.expandFromSubnetEnv()
	if err != nil {
		return c.fail(types.NewError(code, err.Error(), ""), fmt.Errorf("network %q: %w", c.list.Name, err))
	}
	c.list = list
	return 0
}

// resolveFlannelForGC is resolveFlannel for gc, which does not need
// subnet.env to delete stale attachments (each with the config its add was
// cached with): when flanneld is not ready, the config stays as it is and
// flannelPending says why, for the CNI GC of a 1.1.0 config (gc.go).
func (c *call) resolveFlannelForGC() {
	if !hasFlannel(c.list) {
		return
	}
	list, err := c.expandFromSubnetEnv()
	if err != nil {
		c.flannelPending = err
		return
	}
	c.list = list
}

// expandFromSubnetEnv expands c.list from subnet.env.
func (c *call) expandFromSubnetEnv() (*libcni.NetworkConfigList, error) {
	path := filepath.Join(c.env.flannelDir(), SubnetFile)
	env, err := ReadSubnetEnv(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: flanneld has not written %s yet", ErrFlannelNotReady, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFlannelNotReady, err)
	}
	return ExpandFlannel(c.list, env)
}

// attachmentList is the config to run del or check of one attachment
// with: c.list, or, when it has "flannel" plugins, the config the add was
// cached with, else c.list expanded from subnet.env.
func (c *call) attachmentList(rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, error) {
	if !hasFlannel(c.list) {
		return c.list, nil
	}
	if cached, _, err := c.cni.GetNetworkListCachedConfig(c.list, rt); err == nil && cached != nil {
		if list, err := ParseConfig(cached); err == nil && list.Name == c.list.Name && !hasFlannel(list) {
			return list, nil
		}
	}
	return c.expandFromSubnetEnv()
}
