package networkpod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// execModes returns how many of the network's answered Exec calls the agent
// served by fork/exec and in-process.
func execModes(t *testing.T, p *Host, name string) (fork, inproc int64) {
	t.Helper()
	n, err := p.lookup(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n.execCalls[0].Load(), n.execCalls[1].Load()
}

// The agent runs the wrapper in-process only for an image declaring the
// wrapper protocol version it was built with; any other image (no
// declaration, an unknown version) gets the image's own /opt/network
// executables by fork/exec, and a path other than the wrapper's verbs
// always forks.
func TestInProcessOnlyWhenDeclared(t *testing.T) {
	base := netplugImage(t)
	if v := cniWrapperVersion(base); v != netplugin.WrapperVersion {
		t.Fatalf("cni-netplugin declares cni-wrapper %q, want %q (rebuild it: make images)", v, netplugin.WrapperVersion)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-host0"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	strip := func(m map[string]string, set string) map[string]string {
		m = maps.Clone(m)
		delete(m, netplugin.WrapperAnnotationACI)
		delete(m, netplugin.WrapperLabelOCI)
		if set != "" {
			if m == nil {
				m = map[string]string{}
			}
			m[netplugin.WrapperAnnotationACI] = set
		}
		return m
	}
	tests := []struct {
		name       string
		annotation string // "" → none
		inProcess  bool
	}{
		{"declared", netplugin.WrapperVersion, true},
		{"not declared", "", false},
		{"unknown version", "v999", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := *base
			img.Annotations = strip(base.Annotations, tt.annotation)
			img.Labels = strip(base.Labels, "")
			p := newTestHost(t, nil)
			name := fmt.Sprintf("ktnip%d", i)
			conf := []byte(`{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge","bridge":"kt-host0","isGateway":true,` +
				`"ipam":{"type":"host-local","subnet":"10.202.0.0/16"}}`)
			startGenerations(t, p, Spec{Network: name, Image: &img, Config: conf})
			ns := newNetns(t, p.NetnsDir(), fmt.Sprintf("ktn-ip%d", i))
			ctx := context.Background()
			out, stderr, err := p.Exec(ctx, testCall(name, 0, "/opt/network/add", []string{ns, "ktn-ip", "eth0"}, conf))
			if err != nil {
				t.Fatalf("add: %v\nstderr: %s", err, stderr)
			}
			var res struct {
				IPs []struct{ Address string } `json:"ips"`
			}
			if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 || !strings.HasPrefix(res.IPs[0].Address, "10.202.") {
				t.Fatalf("add result %s: %v", out, err)
			}
			// The verb check is the wrapper's either way: same exit code,
			// same CNI error object.
			if _, _, err := p.Exec(ctx, testCall(name, 0, "/opt/network/check", []string{ns}, conf)); err == nil {
				t.Errorf("check with one argument succeeded")
			} else if !strings.Contains(err.Error(), "usage") {
				t.Errorf("check with one argument: %v, want the wrapper's usage error", err)
			}
			if _, stderr, err := p.Exec(ctx, testCall(name, 0, "/opt/network/del", []string{ns, "ktn-ip", "eth0"}, conf)); err != nil {
				t.Fatalf("del: %v\nstderr: %s", err, stderr)
			}
			// gc and status take no arguments, the config on stdin.
			for _, verb := range []string{"gc", "status"} {
				if !p.Provides(name, 0, "/opt/network/"+verb) {
					t.Errorf("the image does not provide %s", verb)
				}
				if _, stderr, err := p.Exec(ctx, testCall(name, 0, "/opt/network/"+verb, nil, conf)); err != nil {
					t.Errorf("%s: %v\nstderr: %s", verb, err, stderr)
				}
			}
			// Not a wrapper verb: always the image's file.
			if _, _, err := p.Exec(ctx, testCall(name, 0, "/bin/true", nil, nil)); err != nil && !strings.Contains(err.Error(), "no such file") {
				t.Fatalf("/bin/true: %v", err)
			}
			fork, inproc := execModes(t, p, name)
			wantFork, wantIn := int64(6), int64(0)
			if tt.inProcess {
				wantFork, wantIn = 1, 5
			}
			if fork != wantFork || inproc != wantIn {
				t.Errorf("calls by fork/exec %d, in-process %d; want %d and %d", fork, inproc, wantFork, wantIn)
			}
		})
	}
}

// Images record where the declaration comes from: the ACI annotation or the
// OCI config label (imagefetch puts OCI config labels in both Labels and
// Annotations; an image stored before Annotations existed has only Labels).
func TestCNIWrapperVersion(t *testing.T) {
	tests := []struct {
		img  *imagefetch.Image
		want string
	}{
		{nil, ""},
		{&imagefetch.Image{}, ""},
		{&imagefetch.Image{Annotations: map[string]string{netplugin.WrapperAnnotationACI: "v1"}}, "v1"},
		{&imagefetch.Image{Annotations: map[string]string{netplugin.WrapperLabelOCI: "v1"}}, "v1"},
		{&imagefetch.Image{Labels: map[string]string{netplugin.WrapperLabelOCI: "v2"}}, "v2"},
		{&imagefetch.Image{Labels: map[string]string{netplugin.WrapperAnnotationACI: "v1"}}, ""},
	}
	for i, tt := range tests {
		if got := cniWrapperVersion(tt.img); got != tt.want {
			t.Errorf("%d: got %q, want %q", i, got, tt.want)
		}
	}
}

// An in-process add whose plugin hangs with a background child holding its
// stdout (in the plugin's process group, or setsid'd into its own session):
// at the limit, or when the caller cancels, every process of the call is
// killed, exactly as for a fork/exec call, and the network still serves.
func TestInProcessTimeoutKillsTree(t *testing.T) {
	p := newTestHost(t, func(o *Options) { o.PluginTimeout = 700 * time.Millisecond })
	aci := filepath.Join(t.TempDir(), "ktn-cnitest.aci")
	testutil.DeriveACI(t, testutil.BuiltImage(t, "cni-netplugin.aci"), aci, "ktn-inproc",
		map[string]string{"/opt/cni/bin/cnitest": testutil.BuildStatic(t, "./internal/testplugins/cnitest")})
	img := fetchImage(t, aci)
	conf := []byte(`{"cniVersion":"1.0.0","name":"ktnhang","type":"cnitest","behavior":"ok"}`)
	startGenerations(t, p, Spec{Network: "ktnhang", Image: img, Config: conf})
	ns := newNetns(t, p.NetnsDir(), "ktn-hang")

	// callProcs lists the processes of the call for container id cid: the
	// plugin (argv0 /opt/cni/bin/cnitest) and its hang child (argv
	// "/proc/self/exe cnitest-hang-child <netns> <cid>").
	callProcs := func(cid string) []string {
		var out []string
		procs, _ := os.ReadDir("/proc")
		for _, e := range procs {
			data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
			if len(argv) == 4 && argv[1] == "cnitest-hang-child" && argv[3] == cid {
				out = append(out, e.Name()+": "+strings.Join(argv, " "))
			}
			if argv[0] == "/opt/cni/bin/cnitest" {
				if env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); err == nil && strings.Contains(string(env), "CNI_CONTAINERID="+cid+"\x00") {
					out = append(out, e.Name()+": "+argv[0])
				}
			}
		}
		return out
	}
	for i, behavior := range []string{"hang", "hang-detached"} {
		for j, cancelIt := range []bool{false, true} {
			name := behavior + map[bool]string{false: " timeout", true: " cancel"}[cancelIt]
			t.Run(name, func(t *testing.T) {
				cid := fmt.Sprintf("ktn-hang-%d%d", i, j)
				// Its state dir: the network's, mounted in its container.
				stdin := []byte(`{"cniVersion":"1.0.0","name":"ktnhang","type":"cnitest","stateDir":"/var/lib/cni","behavior":"` + behavior + `"}`)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if cancelIt {
					go func() {
						_ = testutil.Poll(ctx, 10*time.Second, "the call's two processes", func() error {
							if ps := callProcs(cid); len(ps) < 2 {
								return fmt.Errorf("running: %v", ps)
							}
							return nil
						})
						cancel()
					}()
				}
				start := time.Now()
				_, _, err := p.Exec(ctx, testCall("ktnhang", 0, "/opt/network/add", []string{ns, cid, "eth0"}, stdin))
				took := time.Since(start)
				if cancelIt && !errors.Is(err, context.Canceled) || !cancelIt && !errors.Is(err, netplugin.ErrTimeout) {
					t.Fatalf("add: %v", err)
				}
				if took > 3*time.Second {
					t.Errorf("took %s", took)
				}
				// The agent answers after the kill, and Exec waits for it.
				if left := callProcs(cid); len(left) > 0 {
					t.Fatalf("processes of the call left: %v", left)
				}
				out, stderr, err := p.Exec(context.Background(), testCall("ktnhang", 0, "/opt/network/add", []string{ns, cid + "ok", "eth0"}, conf))
				if err != nil {
					t.Fatalf("next add: %v %s", err, stderr)
				}
				if !json.Valid(out) {
					t.Fatalf("next add printed %q", out)
				}
			})
		}
	}
	if fork, inproc := execModes(t, p, "ktnhang"); fork != 0 || inproc < 6 {
		// The cancelled calls' answers may not be counted (Exec returns on
		// cancel before reading them); the timeouts and next adds are.
		t.Errorf("calls by fork/exec %d, in-process %d; want 0 and >= 6", fork, inproc)
	}
	if st := statusOf(p, "ktnhang"); st.State != StateRunning || st.Restarts != 0 {
		t.Fatalf("container affected by the killed calls: %+v", st)
	}
}
