package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/state"
)

// plantHelperEnv makes the test binary a "kurmad" in a network and mount
// namespace of its own (so that a reconcile that follows a planting can
// only hurt the helper) that plants entries in its netns dir and journal
// the way a hostile plugin could, runs Reconcile and reports what is left.
const plantHelperEnv = "KURMA_PODNET_PLANT_HELPER"

// Canary links (a bridge and a veth) in the helper's own network namespace:
// deleting them is what following a planted symlink to the host's netns
// does.
var plantCanaries = []string{"ktplant0", "ktplant1"}

// plantReport is what the helper saw after Reconcile.
type plantReport struct {
	Links        []string          // the helper's own links
	CanaryMount  bool              // the host dir a symlink led to is still a mounted tmpfs
	CanaryFile   bool              // and still holds its file
	Entries      []string          // left in the netns dir
	Calls        []string          // plugin calls Reconcile made ("del beta <netns> <id> eth0")
	Pods         map[string]string // journaled pods left: id → phase: error
	PlantedAt    map[string]string // what each planted name was
	ReconcileErr string
}

// TestReconcileIgnoresPlantings: entries a plugin could plant in the netns
// dir (it sees that dir; a plugin with CAP_SYS_ADMIN can remount its
// read-only view) and journal records naming paths kurmad did not make are
// never followed by Reconcile: a UUID-named symlink to /proc/1/ns/net and to
// kurmad's own netns, one to a host directory that is a mount point, a bind
// mount of kurmad's own netns, a FIFO; a ready pod whose journaled netns is
// that host directory, a pod being deleted whose netns is a symlink to
// kurmad's netns. Host links and mounts are untouched, the plantings in the
// netns dir are removed (themselves, not their targets), and the pod with a
// foreign netns path is left failed with ErrForeignNetns and no del run.
func TestReconcileIgnoresPlantings(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), plantHelperEnv+"="+dir)
	// Go makes / private in the new mount namespace before the helper runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	t.Logf("helper log:\n%s", stderr.String())
	var r plantReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper report %q: %v", out, err)
	}
	if r.ReconcileErr != "" {
		t.Errorf("Reconcile: %s", r.ReconcileErr)
	}
	for _, l := range plantCanaries {
		if !slices.Contains(r.Links, l) {
			t.Errorf("host link %s was deleted (links left: %v); planted: %v", l, r.Links, r.PlantedAt)
		}
	}
	if !r.CanaryMount || !r.CanaryFile {
		t.Errorf("host mount followed: still mounted %v, file still there %v", r.CanaryMount, r.CanaryFile)
	}
	if len(r.Entries) != 0 {
		t.Errorf("plantings left in the netns dir: %v", r.Entries)
	}
	for _, c := range r.Calls {
		if strings.Contains(c, plantForeignPod) {
			t.Errorf("Reconcile ran a plugin call for the pod whose netns is not its own: %s", c)
		}
	}
	foreign := r.Pods[plantForeignPod]
	if !strings.HasPrefix(foreign, string(state.PhaseFailed)+": ") || !strings.Contains(foreign, ErrForeignNetns.Error()) {
		t.Errorf("pod with a foreign netns path: %q; want it kept failed with %q", foreign, ErrForeignNetns)
	}
	if _, ok := r.Pods[plantDeletingPod]; ok {
		t.Errorf("pod being deleted whose netns entry was a symlink is still journaled: %q", r.Pods[plantDeletingPod])
	}
}

// Pod ids of the journal records the helper plants.
const (
	plantForeignPod  = "5a1e0000-0000-4000-8000-00000000000f"
	plantDeletingPod = "5a1e0000-0000-4000-8000-00000000000d"
)

// plantHelperMain is the helper: see TestReconcileIgnoresPlantings.
func plantHelperMain(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "plant helper:", err)
		os.Exit(1)
	}
	la := netlink.NewLinkAttrs()
	la.Name = plantCanaries[0]
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		fail(fmt.Errorf("bridge: %w", err))
	}
	la = netlink.NewLinkAttrs()
	la.Name = plantCanaries[1]
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: plantCanaries[1] + "p"}); err != nil {
		fail(fmt.Errorf("veth: %w", err))
	}
	hostDir := filepath.Join(dir, "hostdir")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		fail(err)
	}
	if err := unix.Mount("tmpfs", hostDir, "tmpfs", 0, "size=1m"); err != nil {
		fail(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "canary"), []byte("x"), 0o644); err != nil {
		fail(err)
	}
	netnsDir := filepath.Join(dir, "netns")
	planted, err := plantNetnsDir(netnsDir, hostDir)
	if err != nil {
		fail(err)
	}
	store, err := state.Open(filepath.Join(dir, "kurmad.db"))
	if err != nil {
		fail(err)
	}
	if err := plantJournal(store, netnsDir, hostDir); err != nil {
		fail(err)
	}
	cfg, err := netconfig.Parse([]byte(fakeConfig), dir)
	if err != nil {
		fail(err)
	}
	fe := newFakeExec()
	log := logrus.New()
	log.SetOutput(os.Stderr)
	m, err := New(Options{Networks: newFakeNetworks(nil, cfg, store), Exec: fe, Store: store, NetnsDir: netnsDir, PodsDir: filepath.Join(dir, "pods"),
		TeardownTimeout: 10 * time.Second, Logger: log})
	if err != nil {
		fail(err)
	}
	r := plantReport{PlantedAt: planted, Pods: map[string]string{}}
	if err := m.Reconcile(context.Background()); err != nil {
		r.ReconcileErr = err.Error()
	}
	if err := reportPlant(&r, fe, store, netnsDir, hostDir); err != nil {
		fail(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(&r)
	os.Exit(0)
}

// plantNetnsDir fills netnsDir with UUID-named entries that are not pod
// namespaces kurmad made, and says what each is.
func plantNetnsDir(netnsDir, hostDir string) (map[string]string, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, err
	}
	own := fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	planted := map[string]string{}
	symlinks := map[string]string{
		"symlink to /proc/1/ns/net":         "/proc/1/ns/net",
		"symlink to kurmad's netns":         own,
		"symlink to a host mount point":     hostDir,
		"deleting pod's netns (symlink)":    own,
		"symlink to kurmad's netns (again)": "/proc/self/ns/net",
	}
	for what, target := range symlinks {
		name := uuid.NewString()
		if what == "deleting pod's netns (symlink)" {
			name = plantDeletingPod
		}
		if err := os.Symlink(target, filepath.Join(netnsDir, name)); err != nil {
			return nil, err
		}
		planted[name] = what
	}
	bind := filepath.Join(netnsDir, uuid.NewString())
	if err := os.WriteFile(bind, nil, 0o444); err != nil {
		return nil, err
	}
	if err := unix.Mount(own, bind, "", unix.MS_BIND, ""); err != nil {
		return nil, err
	}
	planted[filepath.Base(bind)] = "bind mount of kurmad's netns"
	fifo := filepath.Join(netnsDir, uuid.NewString())
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, err
	}
	planted[filepath.Base(fifo)] = "FIFO"
	return planted, nil
}

// plantJournal adds a ready pod whose netns is hostDir and a pod being
// deleted whose netns entry is a planted symlink; each has one attachment.
func plantJournal(store *state.Store, netnsDir, hostDir string) error {
	att := []state.Attachment{{Network: "beta", Interface: "eth0", Phase: state.AttachDone, Config: []byte(`{"name":"beta"}`)}}
	pods := []*state.Pod{
		{ID: plantForeignPod, Netns: hostDir, Networks: []string{"beta"}, Phase: state.PhaseReady, Created: time.Now(), Attachments: att},
		{ID: plantDeletingPod, Netns: filepath.Join(netnsDir, plantDeletingPod), Networks: []string{"beta"}, Phase: state.PhaseDeleting, Created: time.Now(), Attachments: att},
	}
	for _, p := range pods {
		if err := store.PutPod(p); err != nil {
			return err
		}
	}
	return nil
}

// reportPlant fills r with what is left after Reconcile.
func reportPlant(r *plantReport, fe *fakeExec, store *state.Store, netnsDir, hostDir string) error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		r.Links = append(r.Links, l.Attrs().Name)
	}
	var sfs unix.Statfs_t
	r.CanaryMount = unix.Statfs(hostDir, &sfs) == nil && sfs.Type == unix.TMPFS_MAGIC
	_, err = os.Stat(filepath.Join(hostDir, "canary"))
	r.CanaryFile = err == nil
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		r.Entries = append(r.Entries, e.Name()+" ("+r.PlantedAt[e.Name()]+")")
	}
	fe.mu.Lock()
	for _, c := range fe.calls {
		r.Calls = append(r.Calls, c.String()+" "+strings.Join(c.Args, " "))
	}
	fe.mu.Unlock()
	recs, err := store.ListPods()
	if err != nil {
		return err
	}
	for _, p := range recs {
		r.Pods[p.ID] = string(p.Phase) + ": " + p.Error
	}
	return nil
}
