package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/uuid"

	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// partialExec is a fakeExec whose images lack some executables
// (Provider).
type partialExec struct {
	*fakeExec
	missing map[string]bool // "network path"
}

func (p *partialExec) Provides(network string, _ int, path string) bool {
	return !p.missing[network+" "+path]
}

// mustCreate creates a pod on networks or fails the test.
func (f *fixture) mustCreate(t *testing.T, networks ...string) *state.Pod {
	t.Helper()
	p, err := f.m.Create(context.Background(), CreateRequest{Networks: networks})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gcStdin decodes a gc call's stdin: the config and its valid attachments.
func gcStdin(t *testing.T, c call) (map[string]json.RawMessage, []types.GCAttachment) {
	t.Helper()
	var conf map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.Stdin), &conf); err != nil {
		t.Fatalf("gc stdin %s: %v", c.Stdin, err)
	}
	var valid []types.GCAttachment
	if err := json.Unmarshal(conf[validAttachmentsKey], &valid); err != nil {
		t.Fatalf("gc stdin %s: %s: %v", c.Stdin, validAttachmentsKey, err)
	}
	return conf, valid
}

// TestGC: gc gets the network's config with every journaled attachment of
// that network, and only of that network, as valid, and no arguments; a
// network the config dropped gets its journaled snapshot; an image without
// gc is not asked.
func TestGC(t *testing.T) {
	fe := newFakeExec()
	pe := &partialExec{fakeExec: fe, missing: map[string]bool{"gamma " + netplugin.GCPath: true}}
	f := newFixture(t, pe)
	ctx := context.Background()
	p1 := f.mustCreate(t, "alpha", "beta")
	p2 := f.mustCreate(t, "alpha")
	if err := f.m.GC(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	c := fe.callsFor("gc alpha")
	if len(c) != 1 || len(c[0].Args) != 0 {
		t.Fatalf("gc alpha calls %+v, want one without arguments", c)
	}
	conf, valid := gcStdin(t, c[0])
	want := []types.GCAttachment{{ContainerID: p1.ID, IfName: "eth0"}, {ContainerID: p2.ID, IfName: "eth0"}}
	slices.SortFunc(valid, func(a, b types.GCAttachment) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	slices.SortFunc(want, func(a, b types.GCAttachment) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	if !slices.Equal(valid, want) {
		t.Errorf("valid attachments %v, want %v", valid, want)
	}
	if string(conf["alpha"]) != "1" || string(conf["type"]) != `"fake"` || conf["image"] != nil {
		t.Errorf("gc config %s is not alpha's plugin config", c[0].Stdin)
	}

	if err := f.m.GC(ctx, "gamma"); err != nil || len(fe.callsFor("gc gamma")) != 0 {
		t.Errorf("gc of an image without gc: %v, %d calls", err, len(fe.callsFor("gc gamma")))
	}
	if err := f.m.GC(ctx, "nosuch"); !errors.Is(err, netplugin.ErrUnknownNetwork) {
		t.Errorf("gc of an unknown network: %v", err)
	}

	// beta leaves the config; p1 still uses it.
	f.m = f.newManager(t, pe, parseConfig(t, `{"pod_networks": [{"name": "alpha", "image": "file:///x.aci", "type": "fake"}]}`))
	if err := f.m.GC(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	c = fe.callsFor("gc beta")
	if len(c) != 1 {
		t.Fatalf("gc beta calls %+v", c)
	}
	conf, valid = gcStdin(t, c[0])
	if string(conf["beta"]) != "2" || len(valid) != 1 || valid[0].ContainerID != p1.ID || valid[0].IfName != "eth1" {
		t.Errorf("gc of a dropped network: config %s valid %v, want the snapshot and p1's eth1", c[0].Stdin, valid)
	}
}

// TestCollect: orphan netns files (named like a pod, unknown to the
// journal) stay while a network's gc fails, and go once every gc ran;
// journaled pods' netns files always stay.
func TestCollect(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	p := f.mustCreate(t, "alpha")
	orphan := filepath.Join(f.netns, uuid.NewString())
	if err := netnsfile.Create(orphan); err != nil {
		t.Fatal(err)
	}
	fe.on("gc beta", func(call, context.Context) ([]byte, error) { return nil, errors.New("beta: not running") })
	if n := f.m.Collect(ctx); n != 1 {
		t.Errorf("Collect: %d networks failed, want 1", n)
	}
	if !netnsfile.IsMounted(orphan) {
		t.Fatal("the orphan netns was removed while beta's gc had failed")
	}
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if len(fe.callsFor("gc "+n)) != 1 {
			t.Errorf("gc %s: %d calls, want 1", n, len(fe.callsFor("gc "+n)))
		}
	}
	fe.on("gc beta", nil)
	if n := f.m.Collect(ctx); n != 0 {
		t.Errorf("Collect: %d networks failed, want 0", n)
	}
	if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphan netns still there after every gc ran (%v)", err)
	}
	if !netnsfile.IsMounted(p.Netns) {
		t.Error("Collect removed a journaled pod's netns")
	}
}

// TestCheck: check gets the add's result as prevResult (in the version the
// config declares), a plugin's CNI error degrades the pod with its message
// until a check passes, and the outcomes that are no verdict do not.
func TestCheck(t *testing.T) {
	fe := newFakeExec()
	pe := &partialExec{fakeExec: fe, missing: map[string]bool{"gamma " + netplugin.CheckPath: true}}
	f := newFixture(t, pe)
	f.cfg = parseConfig(t, `{"pod_networks": [
		{"name": "alpha", "image": "file:///x.aci", "type": "fake", "cniVersion": "0.4.0"},
		{"name": "beta", "image": "file:///x.aci", "type": "fake"},
		{"name": "gamma", "image": "file:///x.aci", "type": "fake"}]}`)
	f.m = f.newManager(t, pe, f.cfg)
	ctx := context.Background()
	p := f.mustCreate(t, "alpha", "beta", "gamma")
	if c := f.m.LastCheck(p.ID); c != nil {
		t.Errorf("a new pod shows a check: %+v", c)
	}
	outcomes := func(c *PodCheck) string {
		var out []string
		for _, n := range c.Attachments {
			out = append(out, n.Network+"="+n.Outcome)
		}
		return strings.Join(out, ",")
	}

	rec, c, err := f.m.Check(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != p.ID || rec.Phase != state.PhaseReady {
		t.Errorf("Check returned the record %+v", rec)
	}
	if got := outcomes(c); got != "alpha=passed,beta=passed,gamma=skipped" || c.Degraded {
		t.Errorf("first check: %s degraded %v", got, c.Degraded)
	}
	calls := fe.callsFor("check alpha")
	if len(calls) != 1 || strings.Join(calls[0].Args, " ") != p.Netns+" "+p.ID+" eth0" {
		t.Fatalf("check alpha calls %+v", calls)
	}
	var stdin struct {
		CNIVersion string `json:"cniVersion"`
		Prev       struct {
			CNIVersion string `json:"cniVersion"`
			IPs        []struct {
				Version string `json:"version"`
				Address string `json:"address"`
			} `json:"ips"`
		} `json:"prevResult"`
	}
	if err := json.Unmarshal([]byte(calls[0].Stdin), &stdin); err != nil {
		t.Fatal(err)
	}
	if stdin.CNIVersion != "0.4.0" || stdin.Prev.CNIVersion != "0.4.0" || len(stdin.Prev.IPs) != 1 || stdin.Prev.IPs[0].Version != "4" {
		t.Errorf("check stdin %s: want the result as a 0.4.0 prevResult", calls[0].Stdin)
	}
	if !strings.Contains(fe.callsFor("check beta")[0].Stdin, `"prevResult":{"cniVersion":"1.1.0"`) {
		t.Errorf("check beta stdin %s: want the stored 1.1.0 result (no cniVersion declared)", fe.callsFor("check beta")[0].Stdin)
	}

	fe.on("check beta", func(call, context.Context) ([]byte, error) {
		return nil, fmt.Errorf("exited with code 1: %w", &types.Error{Code: 999, Msg: "eth1 is gone", Details: "link not found"})
	})
	fe.on("check alpha", func(call, context.Context) ([]byte, error) { return nil, errors.New("timed out after 1s") })
	_, c, err = f.m.Check(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(c); got != "alpha=unknown,beta=failed,gamma=skipped" || !c.Degraded || c.Attachments[1].Message != "eth1 is gone: link not found" {
		t.Errorf("check with beta broken: %s degraded %v %+v", got, c.Degraded, c.Attachments)
	}
	if g := f.m.LastCheck(p.ID); g == nil || !g.Degraded {
		t.Errorf("LastCheck after a failed check: %+v", g)
	}
	if l := f.m.List(); len(l) != 1 || f.m.LastCheck(l[0].ID) == nil || !f.m.LastCheck(l[0].ID).Degraded {
		t.Errorf("List after a failed check: %+v", l)
	}

	// No verdict from beta (its network is down, say): it stays degraded.
	fe.on("check beta", func(call, context.Context) ([]byte, error) { return nil, errors.New("network unavailable") })
	if _, c, err = f.m.Check(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if outcomes(c) != "alpha=unknown,beta=unknown,gamma=skipped" || !c.Degraded {
		t.Errorf("check with no verdict from beta after its failure: %s degraded %v", outcomes(c), c.Degraded)
	}

	fe.on("check beta", nil)
	fe.on("check alpha", func(call, context.Context) ([]byte, error) {
		return nil, &types.Error{Code: types.ErrIncompatibleCNIVersion, Msg: "config version does not allow CHECK"}
	})
	if n := f.m.CheckAll(ctx); n != 0 {
		t.Errorf("CheckAll: %d degraded, want 0", n)
	}
	if g := f.m.LastCheck(p.ID); outcomes(g) != "alpha=skipped,beta=passed,gamma=skipped" || g.Degraded {
		t.Errorf("after beta recovered: %s degraded %v", outcomes(g), g.Degraded)
	}

	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.Check(ctx, p.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("check of a deleted pod: %v", err)
	}
	if len(f.m.checks) != 0 {
		t.Errorf("checks of deleted pods kept: %v", f.m.checks)
	}
}

// TestCheckNotReadyPod: a pod whose teardown failed is not checked.
func TestCheckNotReadyPod(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	ctx := context.Background()
	p := f.mustCreate(t, "alpha")
	fe.on("del alpha", func(call, context.Context) ([]byte, error) { return nil, errors.New("del broke") })
	if err := f.m.Delete(ctx, p.ID); err == nil {
		t.Fatal("delete succeeded")
	}
	if _, _, err := f.m.Check(ctx, p.ID); !errors.Is(err, ErrPodNotReady) {
		t.Errorf("check of a failed pod: %v, want ErrPodNotReady", err)
	}
	if len(fe.callsFor("check alpha")) != 0 {
		t.Error("check ran on a failed pod")
	}
	fe.on("del alpha", nil)
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
}

// TestCreateRefusesUnreadyNetwork: a network that cannot serve adds is
// refused before anything is made, with Networks' error and its name, and
// holds nothing.
func TestCreateRefusesUnreadyNetwork(t *testing.T) {
	fe := newFakeExec()
	unavailable := errors.New("unavailable: plugin not ready: uplink down")
	f := newFixture(t, fe)
	f.nets.down["beta"] = unavailable
	_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
	var ne *netplugin.NetworkError
	if !errors.Is(err, unavailable) || !errors.As(err, &ne) || ne.Network != "beta" {
		t.Fatalf("create with beta not ready: %v", err)
	}
	if len(fe.seen()) != 0 || len(f.onlyPodIDs(t)) != 0 {
		t.Errorf("calls %v, journal %v: want nothing made", fe.seen(), f.onlyPodIDs(t))
	}
	if entries, _ := os.ReadDir(f.netns); len(entries) != 0 {
		t.Errorf("netns files made: %d", len(entries))
	}
	if h := f.nets.holders(); len(h) != 0 {
		t.Errorf("generations held: %v", h)
	}
}

// TestCollectSparesCreates: a create under way makes its netns and pod dir
// beside the commit of its intent, so they exist before the journal holds
// the pod; Collect leaves them alone until the create is over, then they
// are orphans like any other.
func TestCollectSparesCreates(t *testing.T) {
	f := newFixture(t, newFakeExec())
	ctx := context.Background()
	id := uuid.NewString()
	if _, _, err := f.m.begin(id, CreateRequest{Networks: []string{"alpha"}}); err != nil {
		t.Fatal(err)
	}
	rec := &state.Pod{ID: id, Netns: f.m.netnsPath(id)}
	if err := f.m.prepare(rec).wait(); err != nil {
		t.Fatal(err)
	}
	if n := f.m.Collect(ctx); n != 0 {
		t.Fatalf("Collect: %d networks failed, want 0", n)
	}
	if !netnsfile.IsMounted(rec.Netns) {
		t.Fatal("Collect removed the netns of a create under way")
	}
	if _, err := os.Stat(f.m.ResolvConfPath(id)); err != nil {
		t.Fatalf("Collect removed the pod dir of a create under way: %v", err)
	}
	f.m.end(id, nil)
	f.m.Collect(ctx)
	if _, err := os.Lstat(rec.Netns); !os.IsNotExist(err) {
		t.Errorf("orphan netns still there once its create was over (%v)", err)
	}
	if _, err := os.Lstat(f.m.podDir(id)); !os.IsNotExist(err) {
		t.Errorf("orphan pod dir still there once its create was over (%v)", err)
	}
}

// TestCreateIntentNotJournaled: when the intent's commit fails, the netns
// and pod dir made beside it are removed, no plugin ran, and the error is
// the journal's.
func TestCreateIntentNotJournaled(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha"}})
	if !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Create = %v; want the journal's ErrClosed", err)
	}
	for _, d := range []string{f.netns, f.pods} {
		if en, _ := os.ReadDir(d); len(en) != 0 {
			t.Errorf("%s holds %d entries after a create whose intent was not journaled", d, len(en))
		}
	}
	if c := fe.seen(); len(c) != 0 {
		t.Errorf("plugin calls %v; want none", c)
	}
}
