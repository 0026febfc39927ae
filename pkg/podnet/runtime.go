package podnet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/state"
)

// A runtime's pod (CreateRequest.Runtime, state.Runtime) is made for one
// of a container runtime's CNI calls (kurma-cni's ADD): the runtime made
// the network namespace, kurmad bind-mounts it at the pod's usual
// <NetnsDir>/<uuid> so that plugin containers see it, attaches the
// networks there (the first one as Interface), journals the pod like any
// other, and on delete runs the dels and removes its bind mount only: the
// namespace and every other link in it stay the runtime's.

// RuntimeRef selects runtime pods by their identity: a container ID, and
// the interface and CNI network when they are not empty.
type RuntimeRef struct {
	ContainerID, Interface, Network string
}

func (r RuntimeRef) matches(rt *state.Runtime) bool {
	return rt != nil && rt.ContainerID == r.ContainerID &&
		(r.Interface == "" || rt.Interface == r.Interface) && (r.Network == "" || rt.Network == r.Network)
}

// ErrConflict: a runtime's attachment (container ID, interface, CNI
// network) that a pod already holds.
var ErrConflict = errors.New("already attached")

// maxRuntimeText caps the runtime's free-form identity fields.
const maxRuntimeText = 256

// checkRuntime refuses a runtime side kurmad could not act on, and
// returns the identity of the runtime's namespace, journaled with the pod
// (see CheckRuntimes); a nil rt is a pod kurmad makes its netns for.
func checkRuntime(rt *state.Runtime) (netnsfile.ID, error) {
	if rt == nil {
		return netnsfile.ID{}, nil
	}
	switch {
	case rt.ContainerID == "":
		return netnsfile.ID{}, fmt.Errorf("%w: a runtime's pod needs its container ID", ErrBadRequest)
	case rt.Interface == "":
		return netnsfile.ID{}, fmt.Errorf("%w: a runtime's pod needs the interface name of its first network", ErrBadRequest)
	case netconfig.CheckInterfaceName(rt.Interface) != "":
		return netnsfile.ID{}, fmt.Errorf("%w: the runtime's interface name: %s", ErrBadRequest, netconfig.CheckInterfaceName(rt.Interface))
	case !filepath.IsAbs(rt.Netns):
		return netnsfile.ID{}, fmt.Errorf("%w: a runtime's pod needs the absolute path of its network namespace, got %q", ErrBadRequest, rt.Netns)
	}
	for _, s := range []string{rt.Owner, rt.ContainerID, rt.Interface, rt.Network, rt.Netns} {
		if len(s) > maxRuntimeText || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return netnsfile.ID{}, fmt.Errorf("%w: the runtime's identity fields must be at most %d printable characters", ErrBadRequest, maxRuntimeText)
		}
	}
	// Before anything is journaled: the runtime must name a namespace
	// kurmad may use (not its own, not a file, something that exists).
	id, err := netnsfile.IdentifyExisting(rt.Netns)
	if err != nil {
		return netnsfile.ID{}, fmt.Errorf("%w: the runtime's netns: %w", ErrBadRequest, err)
	}
	return id, nil
}

// claimRuntime serializes the operations on one runtime attachment and
// refuses one a pod already holds (ErrConflict, naming it): the runtime
// must delete it first, as CNI has it.
func (m *Manager) claimRuntime(rt *state.Runtime) (unlock func(), err error) {
	ref := RuntimeRef{ContainerID: rt.ContainerID, Interface: rt.Interface, Network: rt.Network}
	unlock = m.lockPod(ref.lockKey())
	for _, r := range m.opts.Store.FindPods(func(p *state.Pod) bool { return ref.matches(p.Runtime) }) {
		unlock()
		return nil, fmt.Errorf("container %s interface %s (network %q): pod %s: %w; delete it first",
			rt.ContainerID, rt.Interface, rt.Network, r.ID, ErrConflict)
	}
	return unlock, nil
}

// lockKey is the lockPod key of one runtime attachment; pod ids are UUIDs,
// so it never meets one.
func (r RuntimeRef) lockKey() string {
	return "runtime\x00" + r.Network + "\x00" + r.ContainerID + "\x00" + r.Interface
}

// toStateRuntime is the journal record of a create's runtime side, whose
// namespace checkRuntime identified as id during boot boot.
func toStateRuntime(rt *state.Runtime, id netnsfile.ID, boot string) *state.Runtime {
	if rt == nil {
		return nil
	}
	return &state.Runtime{Owner: rt.Owner, ContainerID: rt.ContainerID, Interface: rt.Interface, Network: rt.Network,
		Netns: rt.Netns, NetnsDev: id.Dev, NetnsIno: id.Ino, BootID: boot}
}

// netnsID is the journaled identity of a runtime pod's namespace, zero
// when the record has none.
func netnsID(rt *state.Runtime) netnsfile.ID {
	return netnsfile.ID{Dev: rt.NetnsDev, Ino: rt.NetnsIno}
}

// makeNetns makes the pod's netns: a new namespace with lo up (from
// Options.NetnsPool), or for a runtime's pod a bind mount of the runtime's
// namespace, left as it is: the one checkRuntime identified, which the
// journal holds.
func (m *Manager) makeNetns(rec *state.Pod) error {
	if rec.Runtime != nil {
		return netnsfile.BindExistingAs(rec.Runtime.Netns, rec.Netns, netnsID(rec.Runtime))
	}
	return m.netns.Create(rec.Netns)
}

// removeNetns removes the pod's netns: a namespace kurmad made goes with
// the links left in it; for a runtime's pod only kurmad's bind mount goes.
func removeNetns(rec *state.Pod) error {
	flush, err := releaseNetns(rec)
	flush()
	return err
}

// releaseNetns is removeNetns with the deletion of the links left in a
// namespace kurmad made returned, to be called once (netnsfile.Release).
func releaseNetns(rec *state.Pod) (flush func(), err error) {
	if rec.Runtime != nil {
		return func() {}, netnsfile.Unbind(rec.Netns)
	}
	return netnsfile.Release(rec.Netns)
}

// FindRuntime returns the pods that ref selects, oldest first.
func (m *Manager) FindRuntime(ref RuntimeRef) ([]*state.Pod, error) {
	return m.opts.Store.FindPods(func(p *state.Pod) bool { return ref.matches(p.Runtime) }), nil
}

// DeleteRuntime deletes every pod ref selects (see Delete) and returns the
// IDs of those it removed. None selected is no error: a runtime's DEL is
// idempotent (the container unknown, deleted before, or rolled back when
// its ADD failed). A pod whose teardown fails stays, failed, and is
// retried by the next DEL; the error names it.
func (m *Manager) DeleteRuntime(ctx context.Context, ref RuntimeRef) ([]string, error) {
	if ref.ContainerID == "" {
		return nil, fmt.Errorf("%w: a container ID is required", ErrBadRequest)
	}
	if ref.Interface != "" {
		unlock := m.lockPod(ref.lockKey())
		defer unlock()
	}
	pods, err := m.FindRuntime(ref)
	if err != nil {
		return nil, err
	}
	return m.deleteEach(ctx, pods)
}

// GCRuntime releases the runtime pods of CNI network network made for
// owner (the runtime: Runtime's Owner) whose attachment (container ID,
// interface) is not in valid, through their plugins' del (Delete), and
// returns their IDs: CNI GC's cni.dev/valid-attachments. A runtime knows
// only its own attachments, so pods of other CNI networks, of other
// owners (another runtime using the same CNI network name), pods kurmad
// made on its own, and pods still being created are left alone.
func (m *Manager) GCRuntime(ctx context.Context, network, owner string, valid []RuntimeRef) ([]string, error) {
	recs, err := m.opts.Store.ListPods()
	if err != nil {
		return nil, err
	}
	keep := map[[2]string]bool{}
	for _, v := range valid {
		keep[[2]string{v.ContainerID, v.Interface}] = true
	}
	var stale []*state.Pod
	others := 0
	for _, r := range recs {
		rt := r.Runtime
		if rt == nil || rt.Network != network || r.Phase == state.PhaseCreating || keep[[2]string{rt.ContainerID, rt.Interface}] {
			continue
		}
		if rt.Owner != owner {
			others++
			continue
		}
		stale = append(stale, r)
	}
	start := time.Now()
	ids, err := m.deleteEach(ctx, stale)
	m.log.WithFields(logrus.Fields{"op": "gc", "cni_network": network, "owner": owner, "valid": len(valid), "released": len(ids),
		"other_owners": others, "duration": time.Since(start)}).
		Info("runtime attachments not in the valid list released")
	return ids, err
}

// deleteEach deletes pods, every one attempted; a pod gone meanwhile
// counts as done.
func (m *Manager) deleteEach(ctx context.Context, pods []*state.Pod) ([]string, error) {
	var ids []string
	var errs []error
	for _, p := range pods {
		err := m.Delete(ctx, p.ID)
		switch {
		case err == nil:
			ids = append(ids, p.ID)
		case errors.Is(err, ErrNotFound):
		default:
			errs = append(errs, err)
		}
	}
	return ids, errors.Join(errs...)
}
