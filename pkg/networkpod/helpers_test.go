package networkpod

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/gendef"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netnsfile"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// testCall is the call of path with args and stdin in generation gen of
// network.
func testCall(network string, gen int, path string, args []string, stdin []byte) netplugin.Call {
	return netplugin.NewCall(netplugin.Target{Network: network, Generation: gen}, path, args, stdin)
}

// newTestHost makes a Host on a fresh short run dir (unix socket paths must
// stay under 108 bytes) with fast restarts, and registers a cleanup that
// stops it and checks nothing is left behind.
func newTestHost(t testing.TB, tweak func(*Options)) *Host {
	t.Helper()
	testutil.RequireRoot(t)
	runDir, err := os.MkdirTemp("", "ktn")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetLevel(logrus.InfoLevel)
	if _, ok := t.(*testing.B); ok || testing.Verbose() == false {
		log.SetLevel(logrus.WarnLevel)
	}
	log.SetOutput(testutil.LogWriter(t))
	opts := Options{
		RunDir:        runDir,
		StateDir:      t.TempDir(),
		PluginTimeout: 20 * time.Second,
		AgentPath:     testutil.BuildStatic(t, "./cmd/kurma-agent"),
		InitPath:      testutil.InitBinary(t),
		Logger:        log,
		StopGrace:     2 * time.Second,
		RestartBase:   100 * time.Millisecond,
		RestartMax:    800 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		assertNothingLeft(t, p)
		_ = unmountUnder(runDir)
		os.RemoveAll(runDir)
	})
	return p
}

// successorHost is a Host on p1's options, as the next kurmad's would be
// (it finds what p1 left running). Its cleanup stops it, then runs after
// (nil: nothing to check then; p1's cleanup checks the run dir last).
func successorHost(t testing.TB, p1 *Host, after func()) *Host {
	t.Helper()
	p2, err := New(p1.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p2.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if after != nil {
			after()
		}
	})
	return p2
}

// assertNothingLeft checks that no mount under the run dir, no cgroup dir
// and no container state of the host remains.
func assertNothingLeft(t testing.TB, p *Host) {
	t.Helper()
	mounts, err := mountPointsUnder(p.opts.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) > 0 {
		t.Errorf("mounts left under %s: %v", p.opts.RunDir, mounts)
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, p.opts.CgroupParent)); err == nil {
			entries, _ := os.ReadDir(filepath.Join(h, p.opts.CgroupParent))
			var names []string
			for _, e := range entries {
				if e.IsDir() {
					names = append(names, e.Name())
				}
			}
			t.Errorf("cgroup dir %s left (children %v)", filepath.Join(h, p.opts.CgroupParent), names)
		}
	}
	if entries, _ := os.ReadDir(p.containersRoot()); len(entries) > 0 {
		t.Errorf("container state left in %s: %d entries", p.containersRoot(), len(entries))
	}
	if entries, _ := os.ReadDir(filepath.Join(p.opts.RunDir, "networks")); len(entries) > 0 {
		t.Errorf("network run dirs left: %d", len(entries))
	}
}

// toolImage makes an image whose rootfs holds hosttool under all its names
// in /bin and whose main executable is /bin/<main>.
func toolImage(t testing.TB, main string, env ...string) *gendef.Image {
	t.Helper()
	tool := testutil.BuildStatic(t, "./internal/testplugins/hosttool")
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	for _, name := range []string{"main", "stubborn", "failmain", "noop", "echo", "fail", "failtext", "hang", "hangchild", "flood", "floodmain", "status", "kubeenv"} {
		dst := filepath.Join(rootfs, "bin", name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(tool, dst); err != nil {
			testutil.CopyExecutable(t, tool, dst)
		}
	}
	return &gendef.Image{
		ID:     "sha512-test-" + main,
		Name:   "kurma.dev/test/hosttool",
		Rootfs: rootfs,
		App:    gendef.App{Exec: []string{"/bin/" + main}, Env: env, User: "0", Group: "0"},
	}
}

// netplugImage fetches the project's cni-netplugin image into a store.
func netplugImage(t testing.TB) *gendef.Image {
	t.Helper()
	return fetchImage(t, testutil.BuiltImage(t, "cni-netplugin.aci"))
}

// fetchImage fetches the ACI at path into a store of the test's own.
func fetchImage(t testing.TB, path string) *gendef.Image {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel) // "not signature-checked" is expected here
	log.SetOutput(testutil.LogWriter(t))
	f, err := imagefetch.New(imagefetch.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	img, err := f.Fetch(context.Background(), "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	return img.Runnable()
}

func startGenerations(t testing.TB, p *Host, specs ...Spec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Start(ctx, specs); err != nil {
		t.Fatal(err)
	}
}

func statusOf(p *Host, name string) Status {
	for _, s := range p.Status() {
		if s.Network == name {
			return s
		}
	}
	return Status{}
}

// statusWhere is a testutil.WaitFor condition: ok holds for the named
// network's status (which the failure shows when it does not).
func statusWhere(p *Host, name string, ok func(Status) bool) func() error {
	return func() error {
		if st := statusOf(p, name); !ok(st) {
			return fmt.Errorf("%s: %+v", name, st)
		}
		return nil
	}
}

// onLog makes o's logger (a *logrus.Logger) call fire with every entry at
// level or more severe: tests wait for what the containers log.
func onLog(o *Options, level logrus.Level, fire func(*logrus.Entry)) {
	l := o.Logger.(*logrus.Logger)
	if !l.IsLevelEnabled(level) {
		l.SetLevel(level)
	}
	l.AddHook(logHook{levels: logrus.AllLevels[:level+1], fire: fire})
}

type logHook struct {
	levels []logrus.Level
	fire   func(*logrus.Entry)
}

func (h logHook) Levels() []logrus.Level { return h.levels }

func (h logHook) Fire(e *logrus.Entry) error {
	h.fire(e)
	return nil
}

// newNetns creates a network namespace bind-mounted at dir/name.
func newNetns(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := netnsfile.Create(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netnsfile.Remove(path) })
	return path
}

// processesWithExe lists pids whose executable is one of the rootfs's
// hosttool copies (as /proc/<pid>/exe shows from the host, any path).
func processesNamed(names ...string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		data, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue
		}
		argv0 := strings.SplitN(string(data), "\x00", 2)[0]
		for _, n := range names {
			if argv0 == n {
				out = append(out, p.Name()+":"+argv0)
			}
		}
	}
	return out
}

func mountinfoHas(s string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return true
		}
	}
	return false
}
