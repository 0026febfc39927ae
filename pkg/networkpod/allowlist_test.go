package networkpod

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/networkpod/agent"
)

// syscallsSeen is what strace saw programs call: ioctl requests and
// netlink families, each with the programs that made it.
type syscallsSeen struct {
	ioctls  map[uint32][]string
	netlink map[uint32][]string
}

// straceLine matches the calls of `strace -f -X raw -e trace=ioctl,socket`:
// the request of an ioctl, the family and protocol of a socket.
var straceLine = regexp.MustCompile(`^(?:\d+\s+)?(?:(ioctl)\(\d+, (0x[0-9a-f]+|\d+)|(socket)\((0x[0-9a-f]+|\d+), [^,]+, (0x[0-9a-f]+|\d+)\))`)

// traced runs argv under strace (env, stdin) and adds what it called to
// seen, under name. It returns the program's exit error, if any.
func (seen *syscallsSeen) traced(t *testing.T, name string, env []string, stdin []byte, argv ...string) error {
	t.Helper()
	out := filepath.Join(t.TempDir(), "strace")
	cmd := exec.Command("strace", append([]string{"-f", "-qq", "-X", "raw", "-e", "trace=ioctl,socket", "-e", "signal=none", "-o", out}, argv...)...)
	cmd.Env, cmd.Stdin = env, bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("strace %s: %v (%v: %s)", name, err, runErr, stderr.Bytes())
	}
	for _, l := range strings.Split(string(data), "\n") {
		m := straceLine.FindStringSubmatch(l)
		switch {
		case m == nil:
		case m[1] == "ioctl":
			seen.add(seen.ioctls, m[2], name)
		case m[3] == "socket" && number(m[4]) == 16: // AF_NETLINK
			seen.add(seen.netlink, m[5], name)
		}
	}
	if runErr != nil {
		return fmt.Errorf("%w: %s", runErr, stderr.Bytes())
	}
	return nil
}

func (seen *syscallsSeen) add(m map[uint32][]string, num, name string) {
	n := number(num)
	if !slices.Contains(m[n], name) {
		m[n] = append(m[n], name)
	}
}

func number(s string) uint32 {
	v, _ := strconv.ParseUint(s, 0, 64)
	return uint32(v)
}

// TestAllowlistsCoverPlugins derives the filter's allowlists from use: it
// runs every verb (add, check, status, gc, del) of every CNI reference
// plugin in kurma's own image (bridge with host-local, portmap, tuning,
// bandwidth and firewall; ptp with loopback; macvlan and ipvlan with
// static; through the image's cni-wrapper, as a call runs them) and nft,
// on the host under strace, and checks that every ioctl request and
// netlink family they use is on the filter's allowlists (agent.AllowedIoctls,
// agent.AllowedNetlink). TestContainedReferencePlugins then runs them
// under the filter itself; flanneld's are TestAllowlistsCoverFlanneld's.
func TestAllowlistsCoverPlugins(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatalf("strace is needed (make deps): %v", err)
	}
	img := netplugImage(t)
	dir := t.TempDir()
	ns := testutil.NewNetnsFile(t, filepath.Join(dir, "ns"))
	master := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kt-alm0"}, PeerName: "kt-alm1"}
	if err := netlink.LinkAdd(master); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range []string{"kt-alm0", "kt-al0"} {
			if link, err := netlink.LinkByName(l); err == nil {
				_ = netlink.LinkDel(link)
			}
		}
	})
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	ipam := filepath.Join(dir, "ipam")
	confs := map[string]string{
		"chain": `{"cniVersion":"1.1.0","name":"ktalchain","plugins":[` +
			`{"type":"bridge","bridge":"kt-al0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","subnet":"10.205.0.0/24","dataDir":"` + ipam + `"}},` +
			`{"type":"portmap","backend":"nftables","capabilities":{"portMappings":true}},` +
			`{"type":"tuning","dataDir":"` + filepath.Join(dir, "tuning") + `","sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"},"mac":"0a:58:0a:cd:00:63","mtu":1400,"promisc":true},` +
			`{"type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"egressRate":1000000,"egressBurst":100000},` +
			`{"type":"firewall","backend":"nftables"}` +
			`],"runtimeConfig":{"portMappings":[{"hostPort":18097,"containerPort":80,"protocol":"tcp"}]}}`,
		"ptp":     `{"cniVersion":"1.1.0","name":"ktalptp","plugins":[{"type":"ptp","ipMasq":true,"ipam":{"type":"host-local","subnet":"10.206.0.0/24","dataDir":"` + ipam + `"}},{"type":"loopback"}]}`,
		"macvlan": `{"cniVersion":"1.1.0","name":"ktalmv","plugins":[{"type":"macvlan","master":"kt-alm0","mode":"bridge","ipam":{"type":"static","addresses":[{"address":"10.207.0.5/24"}]}}]}`,
		"ipvlan":  `{"cniVersion":"1.1.0","name":"ktalipv","plugins":[{"type":"ipvlan","master":"kt-alm0","ipam":{"type":"static","addresses":[{"address":"10.208.0.5/24"}]}}]}`,
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + filepath.Join(img.Rootfs, "opt/cni/bin"),
		"KURMA_CNI_CACHE_DIR=" + filepath.Join(dir, "cache"), "TMPDIR=" + dir}
	seen := &syscallsSeen{ioctls: map[uint32][]string{}, netlink: map[uint32][]string{}}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range confs {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		for _, verb := range []string{"add", "check", "status", "gc", "del"} {
			args := []string{filepath.Join(img.Rootfs, "opt/network", verb)}
			if verb != "gc" && verb != "status" {
				args = append(args, ns, "ktal-"+name, "eth1")
			}
			err := seen.traced(t, name+" "+verb, env, []byte(confs[name]), args...)
			switch {
			case err == nil:
			case name == "ipvlan" && (verb == "add" || verb == "check"):
				t.Logf("ipvlan %s failed (this kernel may lack ipvlan); its calls so far count: %v", verb, err)
			default:
				t.Errorf("%s %s: %v", name, verb, err)
			}
		}
	}
	nftScript := "add table inet ktal\nadd chain inet ktal c { type filter hook input priority 0; }\nlist ruleset\ndelete table inet ktal\n"
	if err := seen.traced(t, "nft", env, []byte(nftScript), "nsenter", "--net="+ns, "nft", "-f", "-"); err != nil {
		t.Errorf("nft: %v", err)
	}
	seen.check(t)
}

// check fails for every request and family seen that the allowlists lack,
// and logs what was seen.
func (seen *syscallsSeen) check(t *testing.T) {
	t.Helper()
	var ioctls, families []string
	allowedIoctl := map[uint32]string{}
	for _, g := range agent.AllowedIoctls() {
		for _, c := range g.Ioctl {
			allowedIoctl[c.Cmd] = c.Name
		}
	}
	for cmd, who := range seen.ioctls {
		name, ok := allowedIoctl[cmd]
		if !ok {
			t.Errorf("ioctl %#x (by %s) is not on the filter's allowlist", cmd, strings.Join(who, ", "))
			name = fmt.Sprintf("%#x", cmd)
		}
		ioctls = append(ioctls, name)
	}
	netlink := agent.AllowedNetlink()
	for proto, who := range seen.netlink {
		i := slices.IndexFunc(netlink, func(f agent.NetlinkFamily) bool { return f.Protocol == proto })
		if i < 0 {
			t.Errorf("netlink family %d (by %s) is not on the filter's allowlist", proto, strings.Join(who, ", "))
			families = append(families, strconv.Itoa(int(proto)))
			continue
		}
		families = append(families, netlink[i].Name)
	}
	sort.Strings(ioctls)
	sort.Strings(families)
	t.Logf("ioctl requests used: %v; netlink families used: %v", ioctls, families)
}

// TestAllowlistsCoverFlanneld runs flanneld (make flanneld: vxlan and
// host-gw) for real under strace: against a real etcd (Debian's
// etcd-server, on the host end of a veth), in a network namespace of the
// test's own, with the vxlan backend and nftables; once it has leased its
// subnet, made its vxlan device and written subnet.env, it is stopped,
// and every ioctl request and netlink family it (and the nft it runs)
// used must be on the filter's allowlists.
func TestAllowlistsCoverFlanneld(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"strace", "etcd", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps): %v", tool, err)
		}
	}
	flanneld := filepath.Join(testutil.RepoRoot(), "plugins/flannel/out/flanneld")
	if _, err := os.Stat(flanneld); err != nil {
		t.Fatalf("flanneld is needed (make flanneld): %v", err)
	}
	dir := t.TempDir()
	ns := testutil.NewNetnsFile(t, filepath.Join(dir, "ns"))
	// The node's link: kt-flv0 in the namespace, its peer on the host,
	// where etcd listens.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kt-flv1"}, PeerName: "kt-flv0"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("kt-flv1"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	host, _ := netlink.ParseAddr("10.209.0.1/24")
	if err := netlink.AddrAdd(veth, host); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	peer, err := netlink.LinkByName("kt-flv0")
	if err != nil {
		t.Fatal(err)
	}
	nsf, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsf.Close()
	if err := netlink.LinkSetNsFd(peer, int(nsf.Fd())); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "10.209.0.2/24", "dev", "kt-flv0"}, {"link", "set", "kt-flv0", "up"}} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	endpoint := startEtcd(t, dir, "10.209.0.1")
	const prefix = "/kt.flannel/network"
	etcdPut(t, endpoint, prefix+"/config", `{"Network":"10.210.0.0/16","SubnetLen":24,"EnableNFTables":true,"Backend":{"Type":"vxlan","VNI":4097}}`)

	subnetEnv := filepath.Join(dir, "subnet.env")
	seen := &syscallsSeen{ioctls: map[uint32][]string{}, netlink: map[uint32][]string{}}
	done := make(chan error, 1)
	go func() {
		done <- seen.traced(t, "flanneld", []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NODE_NAME=kt-fl"}, nil,
			"nsenter", "--net="+ns, flanneld, "--etcd-endpoints="+endpoint, "--etcd-prefix="+prefix,
			"--iface=kt-flv0", "--subnet-file="+subnetEnv, "--ip-masq=false")
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		for _, pid := range pidsWith("--etcd-prefix=" + prefix) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "flanneld" {
				_ = syscallKill(pid)
			}
		}
		if err := <-done; err != nil {
			t.Logf("flanneld: %v", err)
		}
	}
	t.Cleanup(stop)
	testutil.WaitFor(t, 60*time.Second, "flanneld's subnet.env", func() error {
		select {
		case err := <-done:
			stopped = true
			return fmt.Errorf("flanneld ended: %v", err)
		default:
		}
		_, err := os.Stat(subnetEnv)
		return err
	})
	out, err := exec.Command("nsenter", "--net="+ns, "ip", "-d", "link", "show", "flannel.4097").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vxlan id 4097") {
		t.Errorf("flanneld's vxlan device: %v: %s", err, out)
	}
	stop()
	if len(seen.netlink) == 0 {
		t.Fatal("strace saw flanneld open no netlink socket")
	}
	seen.check(t)
}

// startEtcd runs a single-member etcd listening for clients on addr (the
// host's) and returns its client URL.
func startEtcd(t *testing.T, dir, addr string) string {
	t.Helper()
	client, peer := freePort(t, addr), freePort(t, "127.0.0.1")
	clientURL := fmt.Sprintf("http://%s:%d", addr, client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command("etcd", "--name=kt", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kt="+peerURL, "--log-outputs=stderr", "--logger=zap")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.WaitFor(t, 30*time.Second, "etcd", func() error {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd health: %s", resp.Status)
		}
		return nil
	})
	return clientURL
}

// etcdPut sets key to value through etcd's v3 JSON gateway.
func etcdPut(t *testing.T, endpoint, key, value string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value)),
	})
	resp, err := http.Post(endpoint+"/v3/kv/put", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("etcd put %s: %s: %s", key, resp.Status, b)
	}
}

// freePort is a TCP port free on addr right now.
func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func syscallKill(pid int) error { return unix.Kill(pid, unix.SIGTERM) }
