package podnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"sync"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/kurma-project/kurma/pkg/cniresult"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// ErrForeignResult is wrapped by the error of an add whose result claims
// what is not its attachment's: an interface in another network namespace
// than its pod's, or an address another attachment of the network holds.
// A plugin may print anything; kurmad would record and report it (two
// pods with one address in `pod ls`), so the add fails and its del runs.
var ErrForeignResult = errors.New("the result claims what is not this attachment's")

// checkResult checks res, the result of the add of rec.Attachments[idx],
// against the call: every interface with a sandbox is in the pod's
// network namespace (the path the add was given), and no address is held
// by another attachment of the same network, in this pod or another (but
// loopback and link-local ones, every pod's own). The
// spec's own checks of a result (its version, the indexes its addresses
// name) are cniresult.Parse's, the CNI library's.
func (m *Manager) checkResult(rec *state.Pod, idx int, res *current.Result) error {
	for i, itf := range res.Interfaces {
		if itf.Sandbox == "" || filepath.Clean(itf.Sandbox) == filepath.Clean(rec.Netns) {
			continue
		}
		return fmt.Errorf("%w: interfaces[%d] %q is in network namespace %q, not this pod's %s",
			ErrForeignResult, i, itf.Name, itf.Sandbox, rec.Netns)
	}
	if len(res.IPs) == 0 {
		return nil
	}
	network := rec.Attachments[idx].Network
	claimed := map[netip.Addr]int{}
	for i, ip := range res.IPs {
		// Loopback and link-local addresses are every pod's own (the
		// loopback plugin gives each 127.0.0.1 and ::1).
		if a := ip.Address.IP; !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
			if addr, ok := netip.AddrFromSlice(a); ok {
				claimed[addr.Unmap()] = i
			}
		}
	}
	if len(claimed) == 0 {
		return nil
	}
	return m.held.clash(m.opts.Store, rec.ID, idx, network, claimed)
}

// heldAddrs caches, by network, the addresses each done attachment's
// result holds, keyed by the result's text: checkResult scans every pod of
// the journal at each add, and decoding each result again made an add's
// cost (and how long it held the journal's read lock, which every journal
// write waits for) grow with the pods held. A result's text gives its
// addresses, so an entry is never wrong; entries no scan met (pods gone)
// are dropped after each scan.
type heldAddrs struct {
	mu   sync.Mutex
	nets map[string]*addrCache
}

type addrCache struct {
	scan    uint64
	results map[string]*heldResult
}

type heldResult struct {
	ips  []netip.Addr
	scan uint64 // the last scan that met it
}

// addrsOf decodes the addresses a result holds (nil when it holds none,
// or cannot be read).
func addrsOf(result []byte) []netip.Addr {
	var held struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if json.Unmarshal(result, &held) != nil {
		return nil
	}
	var out []netip.Addr
	for _, h := range held.IPs {
		p, err := netip.ParsePrefix(h.Address)
		if err != nil {
			continue
		}
		out = append(out, p.Addr().Unmap())
	}
	return out
}

// clash finds an address of claimed (address → index in the result)
// that a done attachment of network holds, other than pod podID's
// attachment idx.
func (h *heldAddrs) clash(store *state.Store, podID string, idx int, network string, claimed map[netip.Addr]int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nets == nil {
		h.nets = map[string]*addrCache{}
	}
	c := h.nets[network]
	if c == nil {
		c = &addrCache{results: map[string]*heldResult{}}
		h.nets[network] = c
	}
	c.scan++
	var clash error
	store.FindPods(func(p *state.Pod) bool {
		for j, a := range p.Attachments {
			if a.Network != network || a.Phase != state.AttachDone || a.Deleted || len(a.Result) == 0 || (p.ID == podID && j == idx) {
				continue
			}
			r := c.results[string(a.Result)]
			if r == nil {
				r = &heldResult{ips: addrsOf(a.Result)}
				c.results[string(a.Result)] = r
			}
			r.scan = c.scan
			if clash != nil {
				continue
			}
			for _, ip := range r.ips {
				if i, ok := claimed[ip]; ok {
					clash = fmt.Errorf("%w: ips[%d] %s is pod %s's (its %s on network %q)", ErrForeignResult, i, ip, p.ID, a.Interface, network)
				}
			}
		}
		return false
	})
	maps.DeleteFunc(c.results, func(_ string, r *heldResult) bool { return r.scan != c.scan })
	return clash
}

// foreignResultError is the add's error for a result checkResult refused,
// naming the network and the add: an unusable result, as one Parse
// refuses.
func foreignResultError(network string, err error) error {
	return &netplugin.NetworkError{Network: network, Op: netplugin.AddPath, Err: fmt.Errorf("unusable result: %w: %w", cniresult.ErrInvalid, err)}
}
