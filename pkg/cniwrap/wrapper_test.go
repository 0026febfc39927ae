package cniwrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/images/builder"
	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/cniwrap"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// This package's kernel objects (see docs/architecture.md, "a test that
// touches the kernel").
const (
	testBridge = "kt-wrap0"
	testSubnet = "10.201.0.0/16"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bins compiles the wrapper and the CNI plugins once (the same way the image
// builder does) and installs the wrapper as add, del, check and setup.
func bins(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ktw-bin-")
		if binErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if binErr = builder.Compile(ctx, "", binDir, ""); binErr != nil {
			return
		}
		for _, n := range builder.WrapperNames() {
			if binErr = os.Link(filepath.Join(binDir, builder.WrapperBinary), filepath.Join(binDir, n)); binErr != nil {
				return
			}
		}
	})
	if binErr != nil {
		t.Fatalf("building the wrapper and plugins: %v", binErr)
	}
	return binDir
}

// fixture is one test's private state: CNI cache, IPAM data dir, netns dir.
type fixture struct {
	t        *testing.T
	bin      string
	cacheDir string
	ipamDir  string
	nsDir    string
	tmpDir   string // the wrapper's TMPDIR: must stay empty
	cniPath  string
	path     string   // the wrapper's PATH; "" → /usr/sbin:/usr/bin:/sbin:/bin
	env      []string // more of the wrapper's environment
	wrap     []string // a command the wrapper runs under (nsenter --net=...)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, bin: bins(t), cacheDir: filepath.Join(dir, "cache"), ipamDir: filepath.Join(dir, "ipam"), nsDir: filepath.Join(dir, "ns")}
	f.cniPath = f.bin
	f.tmpDir = filepath.Join(dir, "tmp")
	for _, d := range []string{f.nsDir, f.tmpDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if left, _ := os.ReadDir(f.tmpDir); len(left) > 0 {
			t.Errorf("the wrapper left files in TMPDIR: %v", left)
		}
		if l, err := netlink.LinkByName(testBridge); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				t.Errorf("deleting %s: %v", testBridge, err)
			}
		}
	})
	return f
}

func (f *fixture) netns(name string) string {
	return testutil.NewNetnsFile(f.t, filepath.Join(f.nsDir, "ktw"+name))
}

type runResult struct {
	stdout, stderr string
	code           int
}

// run starts the wrapper as the Kurma contract does: argv[0] is the verb's
// path, args are <netns> <uuid> [ifname], the config is on stdin.
func (f *fixture) run(verb string, stdin []byte, args ...string) runResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := append(append(append([]string(nil), f.wrap...), filepath.Join(f.bin, verb)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	path := f.path
	if path == "" {
		path = "/usr/sbin:/usr/bin:/sbin:/bin"
	}
	cmd.Env = []string{"PATH=" + path, "CNI_PATH=" + f.cniPath, "KURMA_CNI_CACHE_DIR=" + f.cacheDir}
	if f.tmpDir != "" {
		cmd.Env = append(cmd.Env, "TMPDIR="+f.tmpDir)
	}
	cmd.Env = append(cmd.Env, f.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := runResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		f.t.Fatalf("running %s: %v", verb, err)
	}
	return r
}

func (f *fixture) mustRun(verb string, stdin []byte, args ...string) runResult {
	f.t.Helper()
	r := f.run(verb, stdin, args...)
	if r.code != 0 {
		f.t.Fatalf("%s %v: exit %d\nstdout: %s\nstderr: %s", verb, args, r.code, r.stdout, r.stderr)
	}
	return r
}

// bridgeConf is a single-plugin bridge + host-local config.
func (f *fixture) bridgeConf(version, name string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, version, name, testBridge, testSubnet, f.ipamDir)
}

// conflist chains bridge + host-local with the given meta plugins.
func (f *fixture) conflist(version, name string, meta ...string) []byte {
	plugins := []string{fmt.Sprintf(`{"type":"bridge","bridge":%q,"isGateway":true,"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`,
		testBridge, testSubnet, f.ipamDir)}
	for _, m := range meta {
		switch m {
		case "portmap":
			plugins = append(plugins, `{"type":"portmap","capabilities":{"portMappings":true}}`)
		case "tuning":
			plugins = append(plugins, `{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"}}`)
		default:
			plugins = append(plugins, fmt.Sprintf(`{"type":%q}`, m))
		}
	}
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":%q,"plugins":[%s]}`, version, name, strings.Join(plugins, ","))
}

// withoutVersion removes conf's cniVersion key.
func withoutVersion(t *testing.T, conf []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "cniVersion")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseResult reads an add result of any version and returns it as 1.0.0.
func parseResult(t *testing.T, out, wantVersion string) *current.Result {
	t.Helper()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if v.CNIVersion != wantVersion {
		t.Errorf("result cniVersion %q, want %q (the plugin's own version, unconverted)", v.CNIVersion, wantVersion)
	}
	r, err := create.Create(v.CNIVersion, []byte(out))
	if err != nil {
		t.Fatalf("parsing result: %v\n%s", err, out)
	}
	cur, err := current.GetResult(r)
	if err != nil {
		t.Fatalf("converting result: %v", err)
	}
	if len(cur.IPs) == 0 {
		t.Fatalf("result has no IPs:\n%s", out)
	}
	return cur
}

// leased reports whether host-local holds ip for network name.
func (f *fixture) leased(name string, ip net.IP) bool {
	_, err := os.Stat(filepath.Join(f.ipamDir, name, ip.String()))
	return err == nil
}

func TestAddDel(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name    string
		version string
		conf    func(f *fixture, version, name string) []byte
	}{
		{"v0.2.0", "0.2.0", (*fixture).bridgeConf},
		{"v0.3.1", "0.3.1", (*fixture).bridgeConf},
		{"v0.4.0", "0.4.0", (*fixture).bridgeConf},
		{"v1.0.0", "1.0.0", (*fixture).bridgeConf},
		{"v1.1.0", "1.1.0", (*fixture).bridgeConf},
		{"conflist-portmap-tuning", "1.0.0", func(f *fixture, v, n string) []byte { return f.conflist(v, n, "portmap", "tuning") }},
		{"conflist-0.4.0-tuning", "0.4.0", func(f *fixture, v, n string) []byte { return f.conflist(v, n, "tuning") }},
		// kurma passes a config without cniVersion as it is: the wrapper
		// reads it as 1.0.0 in add, check and del, and libcni's cache
		// serves del and check under that version.
		{"no cniVersion", "", func(f *fixture, _, n string) []byte { return withoutVersion(t, f.bridgeConf("", n)) }},
		{"conflist without cniVersion", "", func(f *fixture, _, n string) []byte { return withoutVersion(t, f.conflist("", n, "tuning")) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ns := f.netns(fmt.Sprintf("ad%d", i))
			netName := fmt.Sprintf("ktwnet%d", i)
			conf := tt.conf(f, tt.version, netName)
			uuid := fmt.Sprintf("6d1f9a3c-0000-4000-8000-%012d", i)
			version := tt.version
			if version == "" {
				version = "1.0.0"
			}

			r := f.mustRun("add", conf, ns, uuid, "eth0")
			res := parseResult(t, r.stdout, version)
			ip := res.IPs[0].Address.IP
			if !testutil.HasIP(testutil.IPv4In(t, ns, "eth0"), ip) {
				t.Fatalf("eth0 in the netns lacks the result's IP %s", ip)
			}
			if !f.leased(netName, ip) {
				t.Fatalf("host-local holds no lease for %s", ip)
			}
			if version >= "0.4.0" {
				f.mustRun("check", conf, ns, uuid, "eth0")
			} else if r := f.run("check", conf, ns, uuid, "eth0"); r.code == 0 || !strings.Contains(r.stdout, `"code":1,`) {
				t.Errorf("check on a %s config: exit %d stdout %s, want error code 1 (CHECK needs 0.4.0)", tt.version, r.code, r.stdout)
			}

			f.mustRun("del", conf, ns, uuid, "eth0")
			if testutil.IPv4In(t, ns, "eth0") != nil {
				t.Error("eth0 still exists after del")
			}
			if f.leased(netName, ip) {
				t.Errorf("lease for %s not released by del", ip)
			}
			// del is idempotent.
			if r := f.run("del", conf, ns, uuid, "eth0"); r.code != 0 {
				t.Errorf("second del: exit %d, stderr %s", r.code, r.stderr)
			}
			if files, _ := os.ReadDir(filepath.Join(f.cacheDir, "results")); len(files) != 0 {
				t.Errorf("libcni cache not cleaned: %v", files)
			}
		})
	}
}

func TestNoIfnamePicksFreeEthN(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("ifn")
	conf := f.bridgeConf("1.0.0", "ktwifn")
	uuid := "6d1f9a3c-0000-4000-8000-0000000000aa"

	var ips []net.IP
	// The daemon passes an empty third argument when no template is set;
	// leaving it out works the same.
	for i, want := range []string{"eth0", "eth1"} {
		args := []string{ns, uuid}
		if i == 1 {
			args = append(args, "")
		}
		r := f.mustRun("add", conf, args...)
		res := parseResult(t, r.stdout, "1.0.0")
		ip := res.IPs[0].Address.IP
		ips = append(ips, ip)
		var got string
		if idx := res.IPs[0].Interface; idx != nil {
			got = res.Interfaces[*idx].Name
		}
		if got != want {
			t.Errorf("add without ifname chose %q, want %q", got, want)
		}
		if !testutil.HasIP(testutil.IPv4In(t, ns, want), ip) {
			t.Errorf("%s lacks %s", want, ip)
		}
	}
	// del without an ifname removes every cached attachment of this network.
	f.mustRun("del", conf, ns, uuid)
	for i, name := range []string{"eth0", "eth1"} {
		if testutil.IPv4In(t, ns, name) != nil {
			t.Errorf("%s still exists", name)
		}
		if f.leased("ktwifn", ips[i]) {
			t.Errorf("lease %s kept", ips[i])
		}
	}
}

// TestArgsReachPlugins checks per-pod args (args.cni, as kurma writes them
// for `net:IP=...`) reach host-local, both inside a single config and at the
// top of a conflist.
func TestArgsReachPlugins(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("args")
	uuid := "6d1f9a3c-0000-4000-8000-0000000004aa"
	withArgs := func(conf []byte, ip string) []byte {
		var m map[string]any
		if err := json.Unmarshal(conf, &m); err != nil {
			t.Fatal(err)
		}
		m["args"] = map[string]any{"cni": map[string]any{"IP": ip, "other": "x"}}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i, tt := range []struct {
		name string
		conf []byte
		ip   string
	}{
		{"single", withArgs(f.bridgeConf("1.0.0", "ktwargs0"), "10.201.7.7"), "10.201.7.7"},
		{"conflist", withArgs(f.conflist("1.0.0", "ktwargs1", "tuning"), "10.201.7.8"), "10.201.7.8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ifname := fmt.Sprintf("eth%d", i)
			res := parseResult(t, f.mustRun("add", tt.conf, ns, uuid, ifname).stdout, "1.0.0")
			if got := res.IPs[0].Address.IP.String(); got != tt.ip {
				t.Errorf("got IP %s, want the requested %s", got, tt.ip)
			}
			f.mustRun("del", tt.conf, ns, uuid, ifname)
		})
	}
}

func TestDelAfterNetnsGone(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name     string
		version  string
		keepFile bool // unmounted, but the empty file is left behind
	}{
		{"0.3.1", "0.3.1", false},
		{"1.0.0", "1.0.0", false},
		{"1.0.0-stale-file", "1.0.0", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ns := f.netns(fmt.Sprintf("gone%d", i))
			netName := fmt.Sprintf("ktwgone%d", i)
			conf := f.bridgeConf(tt.version, netName)
			uuid := fmt.Sprintf("6d1f9a3c-0000-4000-8000-0000000001%02d", i)
			res := parseResult(t, f.mustRun("add", conf, ns, uuid, "eth0").stdout, tt.version)
			ip := res.IPs[0].Address.IP

			var err error
			if tt.keepFile {
				err = syscall.Unmount(ns, syscall.MNT_DETACH)
			} else {
				err = testutil.RemoveNetnsFile(ns)
			}
			if err != nil {
				t.Fatal(err)
			}
			f.mustRun("del", conf, ns, uuid, "eth0")
			if f.leased(netName, ip) {
				t.Errorf("lease %s kept after del with the netns gone", ip)
			}
			f.mustRun("del", conf, ns, uuid, "eth0")
		})
	}
}

func TestAddFailures(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFixture(t)
	ns := f.netns("fail")
	uuid := "6d1f9a3c-0000-4000-8000-0000000002aa"
	tests := []struct {
		name     string
		conf     string
		args     []string
		wantCode uint
		wantMsg  string
	}{
		{"unknown plugin", `{"cniVersion":"1.0.0","name":"ktwbad","type":"ktw-no-such-plugin"}`, []string{ns, uuid, "eth0"}, 7, "ktw-no-such-plugin"},
		{"unknown ipam", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ktwbad","type":"bridge","bridge":%q,"ipam":{"type":"ktw-no-such-ipam"}}`, testBridge),
			[]string{ns, uuid, "eth0"}, 0, "ktw-no-such-ipam"},
		{"not JSON", `{"cniVersion":`, []string{ns, uuid, "eth0"}, 6, "invalid network config"},
		{"missing netns", string(f.bridgeConf("1.0.0", "ktwbad")), []string{filepath.Join(f.nsDir, "ktwnone"), uuid, "eth0"}, 8, "ktwnone"},
		{"bad usage", string(f.bridgeConf("1.0.0", "ktwbad")), []string{ns}, 4, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.run("add", []byte(tt.conf), tt.args...)
			if r.code == 0 {
				t.Fatalf("exit 0, want failure; stdout %s", r.stdout)
			}
			var e cniwrap.ErrorObject
			if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
				t.Fatalf("stdout is not a CNI error object: %v\n%q", err, r.stdout)
			}
			if e.Code == 0 || (tt.wantCode != 0 && e.Code != tt.wantCode) || e.CNIVersion == "" {
				t.Errorf("error object %+v, want code %d and a cniVersion", e, tt.wantCode)
			}
			if !strings.Contains(e.Msg+e.Details, tt.wantMsg) {
				t.Errorf("error object %+v does not mention %q", e, tt.wantMsg)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, "error") || !strings.Contains(last, tt.wantMsg) {
				t.Errorf("stderr's last line %q does not explain the failure", last)
			}
		})
	}
}

// TestPluginOutputStreams uses fake plugins to check that plugin stderr never
// reaches stdout and that a plugin's silent failure still gives an error
// object with its stderr.
func TestPluginOutputStreams(t *testing.T) {
	testutil.RequireRoot(t) // the netns
	f := newFixture(t)
	dir := t.TempDir()
	write := func(name, script string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("ktw-noisy", `echo "noisy: starting $CNI_COMMAND" >&2
cat >/dev/null
echo '{"cniVersion":"1.0.0","interfaces":[{"name":"'$CNI_IFNAME'"}],"ips":[{"address":"10.201.9.9/16","interface":0}]}'
echo "noisy: done" >&2
`)
	write("ktw-crash", `echo "ktw-crash: something broke" >&2; exit 3`)
	f.cniPath = dir
	ns := f.netns("fake")
	uuid := "6d1f9a3c-0000-4000-8000-0000000003aa"

	r := f.mustRun("add", []byte(`{"cniVersion":"1.0.0","name":"ktwfake","type":"ktw-noisy"}`), ns, uuid, "eth7")
	if strings.Contains(r.stdout, "noisy") || !strings.Contains(r.stderr, "noisy: starting ADD") || !strings.Contains(r.stderr, "noisy: done") {
		t.Errorf("plugin stderr must go to stderr only:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	res := parseResult(t, r.stdout, "1.0.0")
	if res.Interfaces[0].Name != "eth7" {
		t.Errorf("CNI_IFNAME = %q, want eth7", res.Interfaces[0].Name)
	}

	r = f.run("add", []byte(`{"cniVersion":"0.4.0","name":"ktwfake","type":"ktw-crash"}`), ns, uuid, "eth7")
	var e cniwrap.ErrorObject
	if r.code == 0 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.CNIVersion != "0.4.0" || !strings.Contains(e.Details, "something broke") {
		t.Errorf("crash: exit %d stdout %q, want an error object carrying the plugin's stderr", r.code, r.stdout)
	}
}

func TestSetup(t *testing.T) {
	f := &fixture{t: t, bin: bins(t), cacheDir: filepath.Join(t.TempDir(), "cache")}
	f.cniPath = f.bin
	t.Run("missing plugin", func(t *testing.T) {
		for _, conf := range []string{
			`{"cniVersion":"1.0.0","name":"ktws","type":"ktw-missing"}`,
			`{"cniVersion":"1.0.0","name":"ktws","type":"bridge","ipam":{"type":"ktw-missing"}}`,
			`{"cniVersion":"1.0.0","name":"ktws","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"ktw-missing"}]}`,
		} {
			r := f.run("setup", []byte(conf))
			if r.code == 0 || !strings.Contains(r.stderr, `plugin "ktw-missing": not found`) {
				t.Errorf("setup with %s: exit %d, stderr %q", conf, r.code, r.stderr)
			}
		}
	})
	t.Run("unsupported version", func(t *testing.T) {
		r := f.run("setup", []byte(`{"cniVersion":"9.9.9","name":"ktws","type":"bridge"}`))
		if r.code == 0 || !strings.Contains(r.stderr, "bridge") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("runs until SIGTERM", func(t *testing.T) {
		// No cniVersion: the plugins are asked whether they speak the
		// wrapper's default, 1.0.0.
		conf := `{"name":"ktws","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"portmap"},{"type":"tuning"}]}`
		cmd := exec.Command(filepath.Join(f.bin, "setup"))
		cmd.Stdin = strings.NewReader(conf)
		cmd.Env = []string{"CNI_PATH=" + f.cniPath, "KURMA_CNI_CACHE_DIR=" + f.cacheDir}
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		stderr, done := testutil.StartUntil(t, cmd, "ready", 30*time.Second)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("setup after SIGTERM: %v\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("setup did not exit on SIGTERM")
		}
		// It stopped because of the signal, not on its own after ready.
		if !strings.Contains(stderr.String(), "stopping") {
			t.Errorf("setup did not say it was stopping on SIGTERM: %s", stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("setup wrote to stdout: %q", stdout.String())
		}
		if n := strings.Count(stderr.String(), "ready"); n != 1 {
			t.Errorf("%d ready lines, want 1: %s", n, stderr.String())
		}
		if !strings.Contains(stderr.String(), "cniVersion=1.0.0") {
			t.Errorf("the ready line does not say the config was read as 1.0.0: %s", stderr.String())
		}
	})
	t.Run("checks once per config and plugin files", func(t *testing.T) {
		f := &fixture{t: t, bin: t.TempDir(), cacheDir: filepath.Join(t.TempDir(), "cache")}
		f.cniPath = f.bin
		for _, p := range []string{"setup", "bridge", "host-local"} {
			testutil.CopyExecutable(t, filepath.Join(bins(t), p), filepath.Join(f.bin, p))
		}
		conf := `{"cniVersion":"1.0.0","name":"ktws","type":"bridge","ipam":{"type":"host-local"}}`
		for i, want := range []string{"checked=now", "checked=before", "checked=now"} {
			if i == 2 {
				// The image changed: a plugin file is another one.
				later := time.Now().Add(time.Hour)
				if err := os.Chtimes(filepath.Join(f.bin, "host-local"), later, later); err != nil {
					t.Fatal(err)
				}
			}
			if line := f.setupReady(conf); !strings.Contains(line, want) {
				t.Errorf("start %d: ready line %q, want %s", i+1, line, want)
			}
		}
	})
	t.Run("asks each plugin file VERSION once, whatever the config", func(t *testing.T) {
		f := &fixture{t: t, bin: t.TempDir(), cacheDir: filepath.Join(t.TempDir(), "cache")}
		f.cniPath = f.bin
		for _, p := range []string{"setup", "bridge", "host-local"} {
			testutil.CopyExecutable(t, filepath.Join(bins(t), p), filepath.Join(f.bin, p))
		}
		// Another subnet each start (a reload, another network of the
		// image): the config is checked anew, its plugins are not asked
		// again until one of their files changes.
		for i, want := range []string{"asked=2", "asked=0", "asked=1"} {
			if i == 2 {
				later := time.Now().Add(time.Hour)
				if err := os.Chtimes(filepath.Join(f.bin, "host-local"), later, later); err != nil {
					t.Fatal(err)
				}
			}
			conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ktws","type":"bridge","ipam":{"type":"host-local","subnet":"10.220.%d.0/24"}}`, i)
			line := f.setupReady(conf)
			if !strings.Contains(line, "checked=now") || !strings.Contains(line, want) {
				t.Errorf("start %d: ready line %q, want checked=now and %s", i+1, line, want)
			}
		}
		// An answer kept for another file at the plugin's path (another
		// image's) is not the plugin's: it is asked again (trusted, its
		// 9.9.9 would fail the setup), as is host-local, which the file
		// no longer names.
		lie := `{"` + filepath.Join(f.bin, "bridge") + `":{"file":"0 0 0","versions":["9.9.9"]}}`
		if err := os.WriteFile(filepath.Join(f.cacheDir, netplugin.VersionsFile), []byte(lie), 0o600); err != nil {
			t.Fatal(err)
		}
		if line := f.setupReady(`{"cniVersion":"1.0.0","name":"ktws","type":"bridge","ipam":{"type":"host-local","subnet":"10.220.9.0/24"}}`); !strings.Contains(line, "asked=2") {
			t.Errorf("a versions file naming another file: ready line %q, want asked=2 (both plugins asked again)", line)
		}
	})
}

// setupReady starts setup with conf, waits for its ready line, stops it
// and returns that line.
func (f *fixture) setupReady(conf string) string {
	f.t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, "setup"))
	cmd.Stdin = strings.NewReader(conf)
	cmd.Env = []string{"CNI_PATH=" + f.cniPath, "KURMA_CNI_CACHE_DIR=" + f.cacheDir}
	stderr, done := testutil.StartUntil(f.t, cmd, "ready", 30*time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		f.t.Fatal(err)
	}
	if err := <-done; err != nil {
		f.t.Fatalf("setup after SIGTERM: %v\n%s", err, stderr.String())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "ready") {
			return l
		}
	}
	return ""
}
