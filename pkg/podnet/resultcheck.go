package podnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"

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
	claimed := map[string]int{}
	for i, ip := range res.IPs {
		// Loopback and link-local addresses are every pod's own (the
		// loopback plugin gives each 127.0.0.1 and ::1).
		if a := ip.Address.IP; !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
			claimed[a.String()] = i
		}
	}
	if len(claimed) == 0 {
		return nil
	}
	var clash error
	m.opts.Store.FindPods(func(p *state.Pod) bool {
		for j, a := range p.Attachments {
			if clash != nil || a.Network != network || a.Phase != state.AttachDone || a.Deleted || len(a.Result) == 0 || (p.ID == rec.ID && j == idx) {
				continue
			}
			var held struct {
				IPs []struct {
					Address string `json:"address"`
				} `json:"ips"`
			}
			if json.Unmarshal(a.Result, &held) != nil {
				continue
			}
			for _, h := range held.IPs {
				ip, _, err := net.ParseCIDR(h.Address)
				if err != nil {
					continue
				}
				if i, ok := claimed[ip.String()]; ok {
					clash = fmt.Errorf("%w: ips[%d] %s is pod %s's (its %s on network %q)", ErrForeignResult, i, ip, p.ID, a.Interface, network)
				}
			}
		}
		return false
	})
	return clash
}

// foreignResultError is the add's error for a result checkResult refused,
// naming the network and the add: an unusable result, as one Parse
// refuses.
func foreignResultError(network string, err error) error {
	return &netplugin.NetworkError{Network: network, Op: netplugin.AddPath, Err: fmt.Errorf("unusable result: %w: %w", cniresult.ErrInvalid, err)}
}
