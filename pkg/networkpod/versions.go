package networkpod

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// The CNI versions each plugin of an image supports, as kurma's
// cni-wrapper found them at setup (VERSION of each plugin, one process
// each) and left them in its network's state dir (netplugin.VersionsFile).
// The host keeps them in memory by image ID, learned from the state dir
// of a network of the image that runs, and writes them into the state dir
// of each network of the same image that has none before its container
// starts: a new network of an image that runs asks its plugins nothing,
// nor does a reload of a network (its own file).
// They are not kept across kurmad restarts here: each network's own state
// dir keeps its copy, which is what a restart's setup reads.
//
// What a container wrote there is trusted only for the networks of its
// own image (the same plugin files), and only to skip that check: a
// container that lies about its plugins' versions gets another network of
// its image to call them with a config they refuse, which fails that
// network's adds as the plugins would have failed its setup.
//
// Networks of one image that start together with no answers known (a
// cold boot) do not each ask: the first to start asks (it probes), and
// the others' starts wait, after their own preparation, until its state
// dir has the answers (versionWait at most, versionGrace once its start
// ended), then get a copy. Twenty networks of one image asked forty
// plugin processes at a cold boot, a sixth of its CPU.
type versionCache struct {
	mu      sync.Mutex
	byImage map[string][]byte        // image ID → a VersionsFile's content
	probing map[string]chan struct{} // image ID → closed once its prober's start ended
}

const (
	versionWait  = 10 * time.Second
	versionGrace = time.Second
	versionPoll  = 20 * time.Millisecond
)

// seedVersions writes what the cache has for spec's image into its
// network's state dir, unless the dir has a file of its own; when none is
// known yet and another network of the image is asking its plugins, it
// waits for that one's answers (until stop or abandon). Only images that
// declare kurma's cni-wrapper are seeded, or waited for: another image's
// main writes no answers. The caller calls
// done once its start ended: it then no longer holds others waiting for
// it. Best effort: without a file setup asks its plugins.
func (h *Host) seedVersions(spec Spec, stop, abandon <-chan struct{}) (done func()) {
	done = func() {}
	if spec.Image == nil || cniWrapperVersion(spec.Image) == "" {
		return done // only kurma's cni-wrapper writes the answers down
	}
	path := filepath.Join(h.pluginStateHostDir(spec.Network), netplugin.VersionsFile)
	if _, err := os.Lstat(path); err == nil {
		return done // its own, from a start before
	}
	id := spec.Image.ID
	if b := h.imageVersions(spec); b != nil {
		writeVersions(path, b)
		return done
	}
	h.versions.mu.Lock()
	ended, waiting := h.versions.probing[id]
	if !waiting {
		ch := make(chan struct{})
		if h.versions.probing == nil {
			h.versions.probing = map[string]chan struct{}{}
		}
		h.versions.probing[id] = ch
		h.versions.mu.Unlock()
		return func() {
			h.versions.mu.Lock()
			defer h.versions.mu.Unlock()
			delete(h.versions.probing, id)
			close(ch)
		}
	}
	h.versions.mu.Unlock()
	deadline := time.After(versionWait)
	for {
		select {
		case <-ended:
			// Its setup may write the answers just after its start.
			ended, deadline = nil, time.After(versionGrace)
		case <-time.After(versionPoll):
		case <-deadline:
			return done
		case <-stop:
			return done
		case <-abandon:
			return done
		}
		if b := h.imageVersions(spec); b != nil {
			writeVersions(path, b)
			return done
		}
	}
}

// writeVersions writes b as path, a network's VersionsFile, unless it
// exists.
func writeVersions(path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return // one of its own, or no dir
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err != nil || cerr != nil {
		os.Remove(path)
	}
}

// imageVersions is the cache's entry for spec's image; on a miss, it is
// learned from the state dir of another network of the image that runs
// (whose setup wrote it, at its first start or before).
func (h *Host) imageVersions(spec Spec) []byte {
	id := spec.Image.ID
	h.versions.mu.Lock()
	b := h.versions.byImage[id]
	h.versions.mu.Unlock()
	if b != nil {
		return b
	}
	var others []string
	h.mu.Lock()
	for _, g := range h.gens {
		if g.spec.Network != spec.Network && g.spec.Image != nil && g.spec.Image.ID == id && !slices.Contains(others, g.spec.Network) {
			others = append(others, g.spec.Network)
		}
	}
	h.mu.Unlock()
	for _, network := range others {
		if b, err := readVersionsFile(filepath.Join(h.pluginStateHostDir(network), netplugin.VersionsFile)); err == nil {
			h.versions.mu.Lock()
			defer h.versions.mu.Unlock()
			if h.versions.byImage == nil {
				h.versions.byImage = map[string][]byte{}
			}
			h.versions.byImage[id] = b
			return b
		}
	}
	return nil
}

// readVersionsFile reads a VersionsFile a container wrote: a regular file
// (never a link it planted) of at most netplugin.MaxVersionsFile bytes that
// parses as one.
func readVersionsFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, netplugin.MaxVersionsFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > netplugin.MaxVersionsFile {
		return nil, errors.New("too large")
	}
	var v netplugin.PluginVersions
	if err := json.Unmarshal(b, &v); err != nil || len(v) == 0 {
		return nil, errors.New("not a versions file")
	}
	// Kept as kurmad wrote it back: re-encoded, nothing but the fields.
	return json.Marshal(v)
}
