// Package apitest holds an in-memory api.Backend for tests of what sits
// above the API seam (the server's HTTP handling, the client, kurmactl).
// kurmad's real backend is tested in package daemon, over the real parts.
package apitest

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Backend is a fake api.Backend keeping pods and images in memory.
type Backend struct {
	// Hook, when set, is called first by every method with the method's
	// name ("Info", "CreatePod", ...) and the pod/image ID or URI if any;
	// a non-nil error is returned as the method's result. It may panic.
	Hook func(method, arg string) error
	// PullSteps is how many progress reports PullImage sends (default 5).
	PullSteps int

	mu          sync.Mutex
	info        api.Info
	generations []api.Generation // one per network
	pods        []*api.Pod
	images      []api.Image
	created     []api.CreatePodRequest
	calls       map[string][]api.PluginCall // by pod: one add per attachment
	broken      map[string]string           // "pod network" → the message its check fails with
	rev         int                         // the generations' revision: SetGeneration bumps it
	boot        int64                       // tells this backend's revisions from another's
	revReads    int                         // NetworksRevision's calls
	readCh      chan struct{}               // closed at the next of them
	changed     chan struct{}               // closed at the next bump
}

// BreakCheck makes the next checks of pod id fail for network with msg
// (msg "" mends it).
func (b *Backend) BreakCheck(id, network, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken == nil {
		b.broken = map[string]string{}
	}
	if msg == "" {
		delete(b.broken, id+" "+network)
		return
	}
	b.broken[id+" "+network] = msg
}

// CheckPod implements api.Backend: every network passes unless BreakCheck
// broke it.
func (b *Backend) CheckPod(ctx context.Context, id string) (*api.Pod, error) {
	if err := b.hook("CheckPod", id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pods {
		if p.ID != id {
			continue
		}
		c := &api.PodCheck{Time: time.Now().UTC().Truncate(time.Second), Attachments: []api.AttachmentCheck{}}
		for _, a := range p.Attachments {
			nc := api.AttachmentCheck{Network: a.Network, Interface: a.Interface, Outcome: api.CheckPassed}
			if msg, ok := b.broken[id+" "+a.Network]; ok {
				nc.Outcome, nc.Message, c.Degraded = api.CheckFailed, msg, true
			}
			c.Attachments = append(c.Attachments, nc)
		}
		p.Check = c
		cp := *p
		return &cp, nil
	}
	return nil, api.Errorf(api.CodeNotFound, "pod %q not found", id)
}

// PodCalls implements api.Backend: the adds CreatePod made.
func (b *Backend) PodCalls(ctx context.Context, id string) ([]api.PluginCall, error) {
	if err := b.hook("PodCalls", id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pods {
		if p.ID == id {
			return slices.Clone(b.calls[id]), nil
		}
	}
	return nil, api.Errorf(api.CodeNotFound, "pod %q not found", id)
}

// New returns a backend with networks (the first defaultCount of them are
// defaults), all running, each from its own image.
func New(networks []string, defaultCount int) *Backend {
	b := &Backend{info: api.Info{
		Version:  "test",
		StateDir: "/var/lib/kurma",
		RunDir:   "/run/kurma",
		Socket:   "/run/kurma/kurmad.sock",
		Uptime:   "1m0s",
	}}
	for i, n := range networks {
		sum := sha512.Sum512([]byte(n))
		img := "sha512-" + hex.EncodeToString(sum[:])
		b.generations = append(b.generations, api.Generation{
			Network: n, State: api.StateRunning, Image: img, Pid: 1000 + i, Role: api.RoleAttach,
			Default: i < defaultCount, Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		})
		b.images = append(b.images, api.Image{
			ID: img, Name: "kurma.io/net/" + n, Version: "1.0", Format: "aci",
			Source: "file:///images/" + n + ".aci", Size: 4 << 20,
			Fetched: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), InUse: []string{n},
			Verified: &api.ImageVerification{Mode: "required", Method: "signature", Key: "0123456789ABCDEF0123456789ABCDEF01234567"},
		})
	}
	return b
}

// SetGeneration replaces the state of a network's generation (matched by
// network).
func (b *Backend) SetGeneration(n api.Generation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.generations {
		if b.generations[i].Network == n.Network {
			b.generations[i] = n
		}
	}
	b.rev++
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// WaitRevisionReads waits until the server read the revision n times (the
// nth request to GET /v1/networks is then answered, or held when it
// waits); not within 10 s is a test failure.
func (b *Backend) WaitRevisionReads(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		b.mu.Lock()
		reads := b.revReads
		if b.readCh == nil {
			b.readCh = make(chan struct{})
		}
		ch := b.readCh
		b.mu.Unlock()
		if reads >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the revision was read %d times in 10 s, want %d", reads, n)
		}
	}
}

// NetworksRevision implements api.NetworksWatcher: SetGeneration makes a
// new revision.
func (b *Backend) NetworksRevision() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	if b.boot == 0 {
		b.boot = time.Now().UnixNano()
	}
	b.revReads++
	if b.readCh != nil {
		close(b.readCh)
		b.readCh = nil
	}
	return fmt.Sprintf("%d-%d", b.boot, b.rev), b.changed
}

// Created returns the create requests received so far.
func (b *Backend) Created() []api.CreatePodRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.created)
}

func (b *Backend) hook(method, arg string) error {
	if b.Hook == nil {
		return nil
	}
	return b.Hook(method, arg)
}

// Info implements api.Backend.
func (b *Backend) Info(ctx context.Context) (api.Info, error) {
	if err := b.hook("Info", ""); err != nil {
		return api.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	info := b.info
	info.Networks, info.Pods = len(b.generations), len(b.pods)
	return info, nil
}

// CreatePod implements api.Backend: each network gets eth<N> and an
// address 10.204.<pod>.<N+2>/16 in a CNI 1.1.0 result, whose raw form is
// the same result indented, as a plugin might print it.
func (b *Backend) CreatePod(ctx context.Context, req api.CreatePodRequest) (*api.Pod, error) {
	if err := b.hook("CreatePod", req.Name); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	refs := req.Networks
	if len(refs) == 0 {
		for _, n := range b.generations {
			if n.Default {
				refs = append(refs, n.Network)
			}
		}
	}
	id := uuid.NewString()
	pod := &api.Pod{ID: id, Name: req.Name, Netns: "/run/kurma/netns/" + id,
		Attachments: []api.Attachment{}, Created: time.Now().UTC().Truncate(time.Second), Runtime: req.Runtime, State: api.PodReady}
	if rt := req.Runtime; rt != nil {
		ref := api.RuntimeRef{ContainerID: rt.ContainerID, Interface: rt.Interface, Network: rt.Network}
		for _, p := range b.pods {
			if runtimeMatches(ref, p) {
				return nil, api.Errorf(api.CodeConflict, "container %s interface %s: pod %s: already attached", rt.ContainerID, rt.Interface, p.ID)
			}
		}
	}
	for i, ref := range refs {
		name, _, _ := strings.Cut(ref, ":")
		n := b.generation(name)
		if n == nil {
			return nil, api.Errorf(api.CodeUnknownNetwork, "unknown network %q (known: %s)", name, strings.Join(b.names(), ", "))
		}
		if n.State != api.StateRunning {
			return nil, api.Errorf(api.CodeNetworkUnavailable, "network %q: unavailable: %s", name, n.State)
		}
		iface := fmt.Sprintf("eth%d", i)
		if req.Runtime != nil && i == 0 {
			iface = req.Runtime.Interface
		}
		if named, ok := req.Interfaces[name]; ok {
			iface = named
		}
		if b.calls == nil {
			b.calls = map[string][]api.PluginCall{}
		}
		b.calls[id] = append(b.calls[id], api.PluginCall{
			Network: name, Path: netplugin.AddPath, Args: []string{pod.Netns, id, iface},
			Stdin: fmt.Sprintf(`{"name":%q,"type":"bridge","password":"[redacted]"}`, name), Stdout: `{"cniVersion":"1.1.0"}`,
			Stderr: "plugin says hi\n", Started: pod.Created, DurationMS: 12.5, Pid: n.Pid, InProcess: true,
		})
		result := map[string]any{
			"cniVersion": "1.1.0",
			"interfaces": []map[string]any{{"name": iface, "sandbox": pod.Netns}},
			"ips": []map[string]any{{
				"address": fmt.Sprintf("10.204.%d.%d/16", len(b.pods)%250, i+2), "interface": 0,
				"gateway": "10.204.0.1",
			}},
			"dns": map[string]any{},
		}
		res, _ := json.Marshal(result)
		raw, _ := json.MarshalIndent(result, "", "  ")
		pod.Attachments = append(pod.Attachments, api.Attachment{Network: name, Interface: iface, Image: n.Image, Result: res,
			RawResult: string(raw) + "\n"})
	}
	b.pods = append(b.pods, pod)
	cp := *pod
	return &cp, nil
}

// generation is the generation of network name, nil when there is none.
func (b *Backend) generation(name string) *api.Generation {
	for i := range b.generations {
		if b.generations[i].Network == name {
			return &b.generations[i]
		}
	}
	return nil
}

func (b *Backend) names() []string {
	var out []string
	for _, n := range b.generations {
		out = append(out, n.Network)
	}
	return out
}

// ListPods implements api.Backend.
func (b *Backend) ListPods(ctx context.Context) ([]api.Pod, error) {
	if err := b.hook("ListPods", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []api.Pod
	for _, p := range b.pods {
		out = append(out, *p)
	}
	return out, nil
}

// GetPod implements api.Backend.
func (b *Backend) GetPod(ctx context.Context, id string) (*api.Pod, error) {
	if err := b.hook("GetPod", id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pods {
		if p.ID == id {
			cp := *p
			return &cp, nil
		}
	}
	return nil, api.Errorf(api.CodeNotFound, "pod %q not found", id)
}

// DeletePod implements api.Backend.
func (b *Backend) DeletePod(ctx context.Context, id string) error {
	if err := b.hook("DeletePod", id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.pods {
		if p.ID == id {
			b.pods = slices.Delete(b.pods, i, i+1)
			return nil
		}
	}
	return api.Errorf(api.CodeNotFound, "pod %q not found", id)
}

// Networks implements api.Backend.
func (b *Backend) Networks(ctx context.Context) ([]api.Generation, error) {
	if err := b.hook("Networks", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.generations), nil
}

// Images implements api.Backend.
func (b *Backend) Images(ctx context.Context) ([]api.Image, error) {
	if err := b.hook("Images", ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.images), nil
}

// PullImage implements api.Backend: it reports PullSteps progress steps
// of a 1 MiB image and adds it to the store.
func (b *Backend) PullImage(ctx context.Context, uri string, progress func(done, total int64)) (*api.Image, error) {
	if err := b.hook("PullImage", uri); err != nil {
		return nil, err
	}
	steps := b.PullSteps
	if steps <= 0 {
		steps = 5
	}
	const total = 1 << 20
	for i := 1; i <= steps; i++ {
		if progress != nil {
			progress(int64(total*i/steps), total)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(120 * time.Millisecond): // past the server's progress throttle
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s#%d", uri, len(b.images))))
	img := api.Image{ID: "sha256-" + hex.EncodeToString(sum[:]), Name: strings.TrimPrefix(uri, "docker://"),
		Format: "oci", Source: uri, Size: total, Fetched: time.Now().UTC().Truncate(time.Second),
		Verified: &api.ImageVerification{Mode: "none", Method: "none"}}
	b.images = append(b.images, img)
	return &img, nil
}

// RemoveImage implements api.Backend; images in use are refused.
func (b *Backend) RemoveImage(ctx context.Context, id string) error {
	if err := b.hook("RemoveImage", id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, img := range b.images {
		if img.ID == id {
			if len(img.InUse) > 0 {
				return api.Errorf(api.CodeConflict, "image %s is used by network %s", id, strings.Join(img.InUse, ", "))
			}
			b.images = slices.Delete(b.images, i, i+1)
			return nil
		}
	}
	return api.Errorf(api.CodeNotFound, "image %q not found", id)
}

// DeleteRuntimePods implements api.Backend.
func (b *Backend) DeleteRuntimePods(ctx context.Context, ref api.RuntimeRef) ([]string, error) {
	if err := b.hook("DeleteRuntimePods", ref.ContainerID); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	b.pods = slices.DeleteFunc(b.pods, func(p *api.Pod) bool {
		if runtimeMatches(ref, p) {
			ids = append(ids, p.ID)
			return true
		}
		return false
	})
	return ids, nil
}

// GCRuntimePods implements api.Backend.
func (b *Backend) GCRuntimePods(ctx context.Context, req api.GCRequest) ([]string, error) {
	if err := b.hook("GCRuntimePods", req.Network); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	b.pods = slices.DeleteFunc(b.pods, func(p *api.Pod) bool {
		rt := p.Runtime
		if rt == nil || rt.Network != req.Network || rt.Owner != req.Owner || slices.Contains(req.ValidAttachments, api.ValidAttachment{ContainerID: rt.ContainerID, Interface: rt.Interface}) {
			return false
		}
		ids = append(ids, p.ID)
		return true
	})
	return ids, nil
}

func runtimeMatches(ref api.RuntimeRef, p *api.Pod) bool {
	rt := p.Runtime
	return rt != nil && rt.ContainerID == ref.ContainerID &&
		(ref.Interface == "" || rt.Interface == ref.Interface) && (ref.Network == "" || rt.Network == ref.Network)
}

var _ api.Backend = (*Backend)(nil)
