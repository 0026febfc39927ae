package uninstall

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// bridgeNet is a bridge a network's bridge plugin makes: its name and the
// subnets its host-local hands out (the bridge's gateway address is one).
type bridgeNet struct {
	network, bridge string
	subnets         []*net.IPNet
}

// readNetworks reads, from kurmad's config file, the bridges its networks'
// bridge plugins make, and the name of its policy network ("role":
// "policy"), "" when it has none. Only the keys it needs are read: the
// config is kurmad's, checked when kurmad loaded it.
func readNetworks(path string) (nets []bridgeNet, policy string, err error) {
	if path == "" {
		return nil, "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("kurmad's config: %w", err)
	}
	var cfg struct {
		PodNetworks      []json.RawMessage `json:"pod_networks"`
		PodNetworksCamel []json.RawMessage `json:"podNetworks"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")), &cfg); err != nil {
		return nil, "", fmt.Errorf("kurmad's config %s: %w", path, err)
	}
	type plugin struct {
		Type   string `json:"type"`
		Bridge string `json:"bridge"`
		IPAM   struct {
			Subnet string `json:"subnet"`
			Ranges [][]struct {
				Subnet string `json:"subnet"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	for _, raw := range append(cfg.PodNetworks, cfg.PodNetworksCamel...) {
		var entry struct {
			plugin
			Name    string   `json:"name"`
			Role    string   `json:"role"`
			Plugins []plugin `json:"plugins"`
		}
		if json.Unmarshal(raw, &entry) != nil {
			continue
		}
		if entry.Role == "policy" {
			policy = entry.Name
			continue
		}
		plugins := entry.Plugins
		if plugins == nil {
			plugins = []plugin{entry.plugin}
		}
		for _, p := range plugins {
			if p.Type != "bridge" {
				continue
			}
			bn := bridgeNet{network: entry.Name, bridge: p.Bridge}
			if bn.bridge == "" {
				bn.bridge = "cni0" // the bridge plugin's default
			}
			subnets := []string{p.IPAM.Subnet}
			for _, r := range p.IPAM.Ranges {
				for _, s := range r {
					subnets = append(subnets, s.Subnet)
				}
			}
			for _, s := range subnets {
				if _, n, err := net.ParseCIDR(s); err == nil {
					bn.subnets = append(bn.subnets, n)
				}
			}
			nets = append(nets, bn)
		}
	}
	return nets, policy, nil
}

// link is what `ip -json -details link show` says of a link.
type link struct {
	Name     string `json:"ifname"`
	Master   string `json:"master"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
}

// bridges removes each network's bridge that kurma's plugins can be
// proved to have made: a bridge by kind, named by the network's bridge
// plugin, with no port left (no pod's veth, nor anything else), and no
// address but in the network's subnets (the gateway address the plugin
// gives it). A bridge the host had for something else fails one of these.
func (u *run) bridges(nets []bridgeNet) {
	links, err := ipJSON[[]link]("-details", "link", "show")
	if err != nil {
		u.failed(err)
		return
	}
	done := map[string]bool{}
	for _, bn := range nets {
		if done[bn.bridge] {
			continue
		}
		done[bn.bridge] = true
		var br *link
		var ports []string
		for i, l := range links {
			if l.Name == bn.bridge {
				br = &links[i]
			}
			if l.Master == bn.bridge {
				ports = append(ports, l.Name)
			}
		}
		switch {
		case br == nil:
			continue
		case br.LinkInfo.Kind != "bridge":
			u.kept("link %s (network %s's bridge name): it is a %s, not a bridge", bn.bridge, bn.network, br.LinkInfo.Kind)
			continue
		case len(ports) > 0 && !u.o.DryRun:
			u.kept("bridge %s (network %s): ports are on it (%s)", bn.bridge, bn.network, strings.Join(ports, ", "))
			continue
		}
		if other := foreignAddrs(bn); len(other) > 0 {
			u.kept("bridge %s (network %s): it has addresses outside the network's subnets (%s)", bn.bridge, bn.network, strings.Join(other, ", "))
			continue
		}
		if !u.o.DryRun {
			if out, err := exec.Command("ip", "link", "delete", bn.bridge).CombinedOutput(); err != nil {
				u.failed(fmt.Errorf("bridge %s: %w: %s", bn.bridge, err, bytes.TrimSpace(out)))
				continue
			}
		}
		u.removed("bridge %s (network %s's bridge plugin made it, and leaves it by design)", bn.bridge, bn.network)
	}
}

// foreignAddrs lists the addresses of bn's bridge outside bn's subnets
// (IPv6 link-local ones, which the kernel gives, aside).
func foreignAddrs(bn bridgeNet) []string {
	type addrs struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	list, err := ipJSON[[]addrs]("address", "show", "dev", bn.bridge)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, a := range list {
		for _, ai := range a.AddrInfo {
			ip := net.ParseIP(ai.Local)
			if ip == nil || ip.IsLinkLocalUnicast() {
				continue
			}
			in := false
			for _, n := range bn.subnets {
				in = in || n.Contains(ip)
			}
			if !in {
				out = append(out, fmt.Sprintf("%s/%d", ai.Local, ai.PrefixLen))
			}
		}
	}
	return out
}

// ipJSON runs ip -json with args and decodes its answer.
func ipJSON[T any](args ...string) (T, error) {
	var v T
	out, err := exec.Command("ip", append([]string{"-json"}, args...)...).Output()
	if err != nil {
		return v, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	return v, nil
}

// pluginTables are the nft tables kurma's plugin image's CNI plugins make
// (github.com/containernetworking/plugins): bridge's ipMasq, portmap's
// port mappings.
var pluginTables = []struct{ family, name, by string }{
	{"inet", "cni_plugins_masquerade", "the bridge plugin's ipMasq"},
	{"ip", "cni_hostport", "the portmap plugin's"},
	{"ip6", "cni_hostport", "the portmap plugin's"},
}

// tables removes each of pluginTables that no container's rule is left
// in: the plugins give each container's rule its ID as comment, and
// remove it at the container's del, leaving the table. A table with such
// a rule is some other container's (a runtime's own CNI networks use
// these tables too).
func (u *run) tables() {
	for _, t := range pluginTables {
		out, err := exec.Command("nft", "--json", "list", "table", t.family, t.name).Output()
		if err != nil {
			continue // no such table
		}
		if u.o.DryRun {
			// The pods' rules are still in it.
			u.say("would remove nft table %s %s (%s) once the pods are deleted, unless another container's rule is in it", t.family, t.name, t.by)
			continue
		}
		var doc struct {
			Nftables []map[string]json.RawMessage `json:"nftables"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			u.failed(fmt.Errorf("nft table %s %s: %w", t.family, t.name, err))
			continue
		}
		rules := 0
		for _, o := range doc.Nftables {
			var r struct {
				Comment string `json:"comment"`
			}
			if raw, ok := o["rule"]; ok && json.Unmarshal(raw, &r) == nil && r.Comment != "" {
				rules++
			}
		}
		if rules > 0 {
			u.kept("nft table %s %s (%s): %d containers' rules are in it", t.family, t.name, t.by, rules)
			continue
		}
		if !u.o.DryRun {
			if out, err := exec.Command("nft", "delete", "table", t.family, t.name).CombinedOutput(); err != nil {
				u.failed(fmt.Errorf("nft table %s %s: %w: %s", t.family, t.name, err, bytes.TrimSpace(out)))
				continue
			}
		}
		u.removed("nft table %s %s (%s; no container's rule is left in it)", t.family, t.name, t.by)
	}
}

// netpolTablePrefix starts the name of every nft table the netpol
// image's daemon makes for policy network N: "kurma-netpol-N-" and 8 hex
// digits, one per daemon (plugins/netpol/internal/nftable.TableName).
const netpolTablePrefix = "kurma-netpol-"

// isNetpolTable says whether table is one a daemon of policy network
// network made: the prefix alone would also match the tables of a network
// named network-x.
func isNetpolTable(table, network string) bool {
	id, ok := strings.CutPrefix(table, netpolTablePrefix+network+"-")
	if !ok || len(id) != 8 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// netpolTables removes the nft tables of the policy network's daemons. A
// daemon failing closed leaves its table when it stops (nft's persist
// flag: the policed pods' new connections stay dropped until a daemon of
// the same network runs again and removes it); after kurmad stopped, no
// daemon will. A table a daemon still runs with is its own (nft's owner
// flag) and cannot be removed: that is reported.
func (u *run) netpolTables(policy string) {
	if policy == "" {
		return
	}
	out, err := exec.Command("nft", "--json", "list", "tables").Output()
	if err != nil {
		u.failed(fmt.Errorf("nft list tables: %w", err))
		return
	}
	var doc struct {
		Nftables []struct {
			Table *struct {
				Family string `json:"family"`
				Name   string `json:"name"`
			} `json:"table"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		u.failed(fmt.Errorf("nft list tables: %w", err))
		return
	}
	for _, o := range doc.Nftables {
		t := o.Table
		if t == nil || !isNetpolTable(t.Name, policy) {
			continue
		}
		if !u.o.DryRun {
			if out, err := exec.Command("nft", "delete", "table", t.Family, t.Name).CombinedOutput(); err != nil {
				u.failed(fmt.Errorf("nft table %s %s (policy network %s's): %w: %s", t.Family, t.Name, policy, err, bytes.TrimSpace(out)))
				continue
			}
		}
		u.removed("nft table %s %s (policy network %s's daemon's, left when it stopped)", t.Family, t.Name, policy)
	}
}
