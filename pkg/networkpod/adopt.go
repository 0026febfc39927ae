package networkpod

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// Adoption. A plugin container outlives kurmad: on a stop that leaves the
// plugins running (Detach: a restart, an upgrade), kurmad lets go of each
// container and writes down what it ran (its adoption record, in the
// container's run dir); the next kurmad on the same run dir adopts each
// container whose generation it runs again, when it can prove it:
//
//   - its own (ownership.go): libcontainer's state in this run dir names
//     the agent as the container's init, the agent is that process (its
//     start time), and its cgroups are the very ones this run dir recorded
//     (their inodes), the agent in them;
//   - of the same definition: the record's spec hash (the libcontainer
//     config kurmad would run it with, the agent's arguments and
//     environment, the image and the main's config) is the one kurmad
//     computes for the generation now. A kurmad whose containers differ
//     (a network whose definition changed while kurmad was down, a kurmad
//     that contains them otherwise) starts a new one instead;
//   - healthy: its agent answers a watch in the protocol this kurmad
//     speaks, its main running and the agent ready.
//
// Then kurmad serves through it at once, in the state it had (running, or
// unavailable with its reason), and guards it again: the watch (the
// main's output and end, the agent's seccomp listener for the clone3
// gate), the pidfd of the agent, its mount namespace (the calls' views),
// its network's state dir mount. The uevent guard of the container's
// mounts is the agent's own, never interrupted. Whatever cannot be adopted
// is removed as a container of a dead kurmad is.

// adoptionRecord is what a Host writes in a container's run dir once the
// container serves, and again when it lets go of it.
type adoptionRecord struct {
	Spec       string // specHash
	Image      string
	AgentPid   int
	AgentStart uint64 // clock ticks since boot
	State      string // running or unavailable
	Reason     string
	Restarts   int
	Since      time.Time
}

func (h *Host) adoptionRecordPath(key string) string {
	return filepath.Join(h.networkRunDir(key), "adopt.json")
}

// writeAdoptionRecord writes rec for key atomically.
func (h *Host) writeAdoptionRecord(key string, rec *adoptionRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	p := h.adoptionRecordPath(key)
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// survivor is a container a kurmad before this one left running, which
// this Host may adopt.
type survivor struct {
	key   string
	rec   *adoptionRecord
	c     *libcontainer.Container
	pidfd *os.File
}

// findSurvivors sorts the containers on the run dir: those provably this
// run dir's, running, with an adoption record, are kept as survivors; the
// rest are stale and go (cleanupStale).
// The containers are checked survivorChecks at a time: each check is a
// few files read and a pidfd opened, and a boot after a restart checks
// every network's.
func (h *Host) findSurvivors(keys map[string]bool) map[string]*survivor {
	var (
		mu  sync.Mutex
		out = map[string]*survivor{}
		g   errgroup.Group
	)
	g.SetLimit(survivorChecks)
	for k := range keys {
		g.Go(func() error {
			sv, err := h.survivor(k)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					h.log.WithField("container", containerID(k)).WithError(err).Info("a container of a kurmad before this one cannot be adopted")
				}
				return nil
			}
			mu.Lock()
			out[k] = sv
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// survivorChecks is how many containers findSurvivors checks at once.
const survivorChecks = 4

// survivor checks that the container of key runs and is this run dir's
// (see the file's doc), and returns it.
func (h *Host) survivor(key string) (*survivor, error) {
	b, err := os.ReadFile(h.adoptionRecordPath(key))
	if err != nil {
		return nil, err
	}
	rec := &adoptionRecord{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("its adoption record: %w", err)
	}
	c, err := libcontainer.Load(h.containersRoot(), containerID(key))
	if err != nil {
		return nil, fmt.Errorf("its state: %w", err)
	}
	st, err := c.State()
	if err != nil {
		return nil, fmt.Errorf("its state: %w", err)
	}
	if st.InitProcessPid != rec.AgentPid || st.InitProcessStartTime != rec.AgentStart {
		return nil, fmt.Errorf("its init is process %d, its adoption record names %d", st.InitProcessPid, rec.AgentPid)
	}
	pidfd, err := openPidfd(rec.AgentPid, rec.AgentStart)
	if err != nil {
		return nil, fmt.Errorf("its agent: %w", err)
	}
	own, foreign := h.ownCgroups(key)
	if len(foreign) > 0 || len(own) == 0 {
		pidfd.Close()
		return nil, fmt.Errorf("%d of its cgroups are not the ones this run dir recorded", len(foreign))
	}
	if !cgroupsHold(own, rec.AgentPid) {
		pidfd.Close()
		return nil, fmt.Errorf("its agent %d is not in its cgroups", rec.AgentPid)
	}
	return &survivor{key: key, rec: rec, c: c, pidfd: pidfd}, nil
}

// claimSurvivor takes the survivor of key, nil when there is none.
func (h *Host) claimSurvivor(key string) *survivor {
	h.mu.Lock()
	defer h.mu.Unlock()
	sv := h.survivors[key]
	delete(h.survivors, key)
	return sv
}

// adopt makes sv the running instance of generation n (see the file's
// doc); on failure the caller starts n anew, after removing sv.
func (h *Host) adopt(n *generation, sv *survivor, caps []string) (inst *instance, err error) {
	defer func() {
		if err != nil {
			if inst != nil {
				inst.release()
			}
			sv.pidfd.Close()
		}
	}()
	if want := h.generationHash(n, caps); sv.rec.Spec != want {
		return nil, errors.New("it runs another definition of the generation")
	}
	inst = newInstance(h, n.key, n.log)
	inst.c, inst.agentPid, inst.pidfd, inst.adopted, inst.record = sv.c, sv.rec.AgentPid, sv.pidfd, true, sv.rec
	inst.started = time.Now()
	go inst.waitAgent()
	if err := h.watchAgent(inst, n.log); err != nil {
		return inst, err
	}
	if !inst.state.Ready || inst.ended() {
		return inst, fmt.Errorf("its main is not running: %v", inst.endReason())
	}
	mainPid := inst.mainHostPid()
	if err := checkAgentMounts(inst.agentPid, mainPid); err != nil {
		return inst, err
	}
	if inst.mntns, err = openMountNamespace(inst.agentPid); err != nil {
		return inst, err
	}
	// Mounted still where kurmad's mount namespace outlived the last
	// kurmad; else the loop device the container's mount holds is mounted
	// again (statedir.go).
	if err := h.acquireStateDir(n.spec.Network, effectiveLimits(n.spec.Limits)); err != nil {
		return inst, err
	}
	inst.holdsState = true
	inst.pid = mainPid
	n.log.WithFields(logrus.Fields{"pid": inst.pid, "agent": inst.agentPid}).Info("adopted the container a kurmad before this one left running")
	return inst, nil
}

// checkAgentMounts checks that the agent's PID names its container's mount
// namespace, the one its main (mainPid, 0: none to compare) runs in: the
// calls' views are made from it. An agent whose main thread ran a call's
// process start (kurma-agent before it kept that thread to itself) is
// parked in that call's view for good, and a view made from an old gc
// call's would mount over the host's netns dir.
func checkAgentMounts(agentPid, mainPid int) error {
	if mainPid == 0 {
		return nil
	}
	agentNs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", agentPid))
	if err != nil {
		return fmt.Errorf("its agent's mount namespace: %w", err)
	}
	mainNs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", mainPid))
	if err != nil {
		return fmt.Errorf("its main's mount namespace: %w", err)
	}
	if agentNs != mainNs {
		return fmt.Errorf("its agent's main thread is in mount namespace %s, not the container's (%s, its main's)", agentNs, mainNs)
	}
	return nil
}

// record writes inst's adoption record for generation n in state (with
// reason).
func (h *Host) recordAdoption(n *generation, inst *instance, caps []string, state, reason string) {
	start, err := processStart(inst.agentPid)
	if err != nil {
		return // gone: nothing to adopt
	}
	n.mu.Lock()
	restarts, since := n.restarts, n.since
	n.mu.Unlock()
	rec := &adoptionRecord{Spec: h.generationHash(n, caps), Image: n.spec.Image.ID, AgentPid: inst.agentPid, AgentStart: start,
		State: state, Reason: reason, Restarts: restarts, Since: since}
	if err := h.writeAdoptionRecord(n.key, rec); err != nil {
		n.log.WithError(err).Warn("cannot write the container's adoption record: the next kurmad will start it anew")
	}
}

// generationHash is specHash of generation n with caps, computed once for
// each set of capabilities.
func (h *Host) generationHash(n *generation, caps []string) string {
	key := strings.Join(caps, ",")
	n.hashMu.Lock()
	defer n.hashMu.Unlock()
	if n.hash == "" || n.hashCaps != key {
		n.hash, n.hashCaps = h.specHash(n.spec, caps), key
	}
	return n.hash
}

// specHash identifies what the generation's container runs: the
// libcontainer config kurmad runs it with, the agent's process (its
// arguments, the main's among them, its environment and capabilities), the
// image and the main's config. A container is adopted only by a kurmad
// that would run it the same.
func (h *Host) specHash(spec Spec, caps []string) string {
	cfg := h.containerConfig(spec, filepath.Join(h.overlayDir(spec.key()), "merged"), caps)
	proc := h.agentProcess(spec, caps, quietLog)
	b, _ := json.Marshal(struct {
		Config  any
		Process any
		Image   string
		Main    []byte
		Watch   int
	}{cfg, proc, spec.Image.ID, spec.Config, agent.WatchProtocol})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// quietLog discards what agentProcess logs when specHash calls it.
var quietLog = func() logrus.FieldLogger { l := logrus.New(); l.SetOutput(io.Discard); return l }()

// Survivor is a running container of a kurmad before this one, which
// this Host adopts when it is asked to start its generation again.
type Survivor struct {
	Network    string
	Generation int
	Image      string // its image ID
}

// Survivors lists the containers a kurmad before this one left running on
// the run dir that this Host may adopt (Start of their generation adopts
// them; Prune removes the others). It prepares the Host when it was not
// (the first Start's work).
func (h *Host) Survivors() ([]Survivor, error) {
	if err := h.prepare(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Survivor, 0, len(h.survivors))
	for k, sv := range h.survivors {
		net, gen, ok := splitKey(k)
		if !ok {
			continue
		}
		out = append(out, Survivor{Network: net, Generation: gen, Image: sv.rec.Image})
	}
	slices.SortFunc(out, func(a, b Survivor) int {
		if c := strings.Compare(a.Network, b.Network); c != 0 {
			return c
		}
		return a.Generation - b.Generation
	})
	return out, nil
}

// Prune removes the survivors no Start claimed, but those keep says to
// keep (a generation still to start).
func (h *Host) Prune(keep func(network string, generation int) bool) {
	h.mu.Lock()
	var drop []*survivor
	for k, sv := range h.survivors {
		net, gen, _ := splitKey(k)
		if keep != nil && keep(net, gen) {
			continue
		}
		drop = append(drop, sv)
		delete(h.survivors, k)
	}
	h.mu.Unlock()
	for _, sv := range drop {
		h.removeSurvivor(sv)
	}
}

// removeSurvivor removes a survivor as a container of a dead kurmad:
// SIGTERM to its main first, which gets the grace period.
func (h *Host) removeSurvivor(sv *survivor) {
	log := h.log.WithField("container", containerID(sv.key))
	log.Info("stopping a container a kurmad before this one left running: no generation of this kurmad's runs it")
	_ = sv.c.Signal(unix.SIGTERM)
	waitPidfd(sv.pidfd, h.opts.StopGrace)
	sv.pidfd.Close()
	if err := h.destroyContainer(sv.key, sv.c); err != nil {
		log.WithError(err).Warn("removing a container of a kurmad before this one")
	}
}

// splitKey is containerKey's inverse.
func splitKey(key string) (string, int, bool) {
	i := strings.LastIndexByte(key, '+')
	if i < 0 {
		return "", 0, false
	}
	var gen int
	if _, err := fmt.Sscan(key[i+1:], &gen); err != nil {
		return "", 0, false
	}
	return key[:i], gen, true
}

// waitPidfd waits up to limit for the process of pidfd to end.
func waitPidfd(pidfd *os.File, limit time.Duration) {
	fds := []unix.PollFd{{Fd: int32(pidfd.Fd()), Events: unix.POLLIN}}
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return
		}
	}
}
