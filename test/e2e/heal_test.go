package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// serveImageAt serves the test image over plain HTTP on addr until the
// test ends.
func serveImageAt(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, testImage())
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// TestFetchRetry: the image server is down at boot: the networks show
// failed with the reason and their next attempt, creates on them get 503;
// once it is up, kurmactl net retry fetches at once, and the background
// retries get the other network running, both without a restart.
func TestFetchRetry(t *testing.T) {
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "http://" + addr + "/kurma-e2e.aci"
	late, later := cnitestNet("late", "ok"), cnitestNet("later", "ok")
	late.Image, later.Image = url, url
	// Plain http, unpinned: only the network's own "verify": "none" lets it run.
	late.Conf["verify"], later.Conf["verify"] = "none", "none"
	e.writeConfig([]netDef{cnitestNet("up", "ok"), late, later}, nil)
	e.start()

	var failed api.Generation
	testutil.WaitFor(t, 30*time.Second, "later's fetch to fail twice", func() error {
		n, err := e.network("later")
		if err != nil {
			return err
		}
		if n.State != api.StateFailed || time.Until(n.NextRetry) < 2*time.Second {
			return fmt.Errorf("later is %s, next attempt %v", n.State, n.NextRetry)
		}
		failed = n
		return nil
	})
	if !strings.Contains(failed.Reason, "connection refused") {
		t.Errorf("later = %+v, want failed with the fetch error", failed)
	}
	_, took, err := e.timedCreate("later")
	wantUnavailable(t, "create on a network whose fetch failed", "later", err, took)
	if out := e.mustCtl("net", "ls"); !regexp.MustCompile(`later +1 +failed .*connection refused.*\(next attempt in \d+s\)`).MatchString(out) {
		t.Errorf("net ls does not show later's next attempt:\n%s", out)
	}

	serveImageAt(t, addr)
	out := e.mustCtl("net", "retry", "later")
	if !strings.Contains(out, "later") {
		t.Errorf("net retry later:\n%s", out)
	}
	var n api.Generation
	testutil.WaitFor(t, 10*time.Second, "later to run after net retry", func() error { return e.networkIn("later", api.StateRunning, &n) })
	if time.Now().After(failed.NextRetry) {
		t.Errorf("later ran only after its next attempt was due (%v): net retry did not retry now", failed.NextRetry)
	}
	testutil.WaitFor(t, 60*time.Second, "late to run on its own", func() error { return e.networkIn("late", api.StateRunning, &n) })
	if n.Generation != 1 || n.Restarts != 0 {
		t.Errorf("late = %+v, want its first generation, started once", n)
	}
	p := e.createPod("--net", "late", "--net", "later")
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// masqRules lists the rules the bridge plugin's ipMasq made for pod id.
func masqRules(id string) []string {
	out, _ := exec.Command("nft", "list", "chain", "inet", "cni_plugins_masquerade", "masq_checks").CombinedOutput()
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "id: "+id) {
			rules = append(rules, strings.TrimSpace(l))
		}
	}
	return rules
}

// leasesOf lists host-local's leases held by pod id.
func (e *env) leasesOf(id string) []string {
	var out []string
	for _, l := range testutil.HostLocalLeases(e.StateDir) {
		if owner, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(owner), id) {
			out = append(out, l)
		}
	}
	return out
}

// TestDelRetried: a del that fails keeps the pod, its netns, its address
// and its masquerade rule; once the plugin's del succeeds again, kurmad's
// retry removes them all. A pod whose del keeps failing is removed with
// --force, which names the network, and kurmad runs that network's gc at
// once; a gc that cannot release what the del left (the plugin's del still
// fails) is tried again, and the next one, once it succeeds, releases the
// pod's lease.
func TestDelRetried(t *testing.T) {
	e := newEnv(t)
	masq := netDef{Name: "masq", Conf: map[string]any{"cniVersion": "1.0.0", "plugins": []any{
		map[string]any{"type": "bridge", "bridge": "kt-e2e0", "isGateway": true, "ipMasq": true,
			"ipam": map[string]any{"type": "host-local", "subnet": "10.204.0.0/16"}},
		// Deleted first: while it fails, the bridge's del does not run.
		map[string]any{"type": "cnitest", "stateDir": cnitestStateDir},
	}}}
	metricsSock := filepath.Join(e.Dir, "metrics.sock")
	e.writeConfig([]netDef{masq, cnitestNet("sticky", "ok")}, map[string]any{"metrics_listen": metricsSock})
	e.start()
	p := e.createPod("--net", "masq")
	if len(masqRules(p.ID)) != 1 || len(e.leasesOf(p.ID)) != 1 {
		t.Fatalf("pod %s: masquerade rules %v, leases %v; want one of each", p.ID, masqRules(p.ID), e.leasesOf(p.ID))
	}
	failDel := filepath.Join(e.StateDir, "networks", "masq", "cnitest-fail-del")
	if err := os.WriteFile(failDel, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := e.ctl("pod", "rm", p.ID)
	if err == nil || !strings.Contains(errOut, "del told to fail") || !strings.Contains(errOut, "kept with its netns") {
		t.Fatalf("pod rm with a failing del: %v, stderr %s", err, errOut)
	}
	if _, err := os.Stat(p.Netns); err != nil {
		t.Errorf("netns removed while its del had not succeeded: %v", err)
	}
	if len(masqRules(p.ID)) != 1 || len(e.leasesOf(p.ID)) != 1 {
		t.Errorf("while its del fails: masquerade rules %v, leases %v; want them kept for the retry", masqRules(p.ID), e.leasesOf(p.ID))
	}
	pods := e.listPods()
	if len(pods) != 1 || !strings.Contains(pods[0].Error, "del told to fail") {
		t.Errorf("pods while the del fails: %+v, want the pod with its error", pods)
	}
	if err := os.Remove(failDel); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "kurmad's retry to finish the delete", func() error {
		if pods := e.listPods(); len(pods) > 0 {
			return fmt.Errorf("pod still listed: %s", pods[0].Error)
		}
		return nil
	})
	if r := masqRules(p.ID); len(r) > 0 {
		t.Errorf("masquerade rules left: %v", r)
	}
	e.checkCleanLive()

	// --force.
	s := e.createPod("--net", "sticky")
	if err := os.WriteFile(filepath.Join(e.StateDir, "networks", "sticky", "cnitest-fail-del"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.ctl("pod", "rm", s.Name); err == nil {
		t.Fatal("pod rm succeeded with a failing del")
	}
	out, errOut, err := e.ctl("pod", "rm", "--force", s.Name)
	if err != nil || out != s.ID+"\n" || !strings.Contains(errOut, "network sticky (eth0): del did not succeed, what it made may be left: ") ||
		!strings.Contains(errOut, "del told to fail") {
		t.Errorf("pod rm --force: %v, stdout %q, stderr %q", err, out, errOut)
	}
	e.checkCleanLive()

	// --force on a network with a lease: the removal runs masq's gc (its
	// call counted), which, while the plugin's del fails, cannot delete the
	// pod's cached attachment either and keeps its lease; once the del
	// succeeds, the next gc (the next boot's) releases it.
	f := e.createPod("--net", "masq")
	t.Cleanup(func() { _ = testutil.DeleteMasqueradeRules(f.ID) }) // its netns went before any del could remove it
	if err := os.WriteFile(failDel, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gcSeries := `kurma_plugin_calls_total{network="masq",outcome="failed",verb="gc"}`
	if got := metric(t, scrape(t, metricsSock), gcSeries); got != 0 {
		t.Fatalf("masq's gc failed %v times before the removal by force", got)
	}
	if _, errOut, err := e.ctl("pod", "rm", "--force", f.ID); err != nil || !strings.Contains(errOut, "network masq (eth0): del did not succeed") {
		t.Fatalf("pod rm --force on masq: %v, stderr %q", err, errOut)
	}
	if got := metric(t, scrape(t, metricsSock), gcSeries); got != 1 {
		t.Errorf("masq's gc calls after the removal by force: %v failed, want 1", got)
	}
	if len(e.leasesOf(f.ID)) != 1 {
		t.Errorf("leases of the pod removed by force while its del and gc fail: %v, want its one lease kept", e.leasesOf(f.ID))
	}
	if err := os.Remove(failDel); err != nil {
		t.Fatal(err)
	}
	e.stop()
	e.start()
	testutil.WaitFor(t, 30*time.Second, "the boot's gc to release the lease of the pod removed by force", func() error {
		if l := e.leasesOf(f.ID); len(l) > 0 {
			return fmt.Errorf("leases %v", l)
		}
		return nil
	})
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestTryAgainLater: an add answering CNI error 11 is run again until it
// succeeds; one that always does fails after plugin_timeout with 503
// naming the network.
func TestTryAgainLater(t *testing.T) {
	e := newEnv(t)
	busy := cnitestNet("busy", "try-again")
	busy.Conf["tries"] = 2
	e.writeConfig([]netDef{busy, cnitestNet("stuck", "try-again")}, map[string]any{"plugin_timeout": "2s"})
	e.start()
	p := e.createPod("--net", "busy")
	if n := strings.Count(e.Log(), "add: the plugin asks to try again later"); n < 2 {
		t.Errorf("busy's add was retried %d times, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := e.Client.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"stuck"}})
	took := time.Since(start)
	var aerr *api.Error
	if !errors.As(err, &aerr) || aerr.Status != http.StatusServiceUnavailable || aerr.Code != api.CodeNetworkUnavailable ||
		!strings.Contains(aerr.Message, `network "stuck"`) || !strings.Contains(aerr.Message, "try again later") {
		t.Errorf("create on stuck: %v, want 503 network_unavailable naming stuck", err)
	}
	if took < time.Second || took > 10*time.Second {
		t.Errorf("create on stuck took %v with plugin_timeout 2s", took)
	}
	e.mustCtl("pod", "rm", p.ID)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestPodNames: a name is unique among pods (409 name_in_use); a pod
// without one gets a readable generated one; pod rm NAME resolves.
func TestPodNames(t *testing.T) {
	e := newEnv(t)
	e.writeConfig([]netDef{{Name: "n", Default: true, Conf: cnitestConf("ok")}}, nil)
	e.start()
	web := e.createPod("--name", "web")
	_, errOut, err := e.ctl("pod", "create", "--name", "web")
	if err == nil || !strings.Contains(errOut, `"web" is the name of pod `+web.ID) {
		t.Errorf("second web: %v, stderr %q", err, errOut)
	}
	_, err = e.Client.CreatePod(context.Background(), api.CreatePodRequest{Name: "web"})
	wantAPI(t, err, http.StatusConflict, api.CodeNameInUse, "web")
	anon := e.createPod()
	if !regexp.MustCompile(`^[a-z]+_[a-z]+$`).MatchString(anon.Name) {
		t.Errorf("generated name %q, want adjective_noun", anon.Name)
	}
	if out := e.mustCtl("pod", "ls"); !strings.Contains(out, anon.Name) {
		t.Errorf("pod ls does not show %s:\n%s", anon.Name, out)
	}
	e.mustCtl("pod", "rm", "web", anon.Name)
	again := e.createPod("--name", "web")
	e.mustCtl("pod", "rm", again.Name)
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestFetchProgress: while a network's image downloads at boot, net ls
// shows how much has arrived, of how much, and for how long; the network
// runs once the rest arrives.
func TestFetchProgress(t *testing.T) {
	e := newEnv(t)
	img, err := os.ReadFile(testImage())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ".aci") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		half := len(img) / 2
		_, _ = w.Write(img[:half])
		w.(http.Flusher).Flush()
		select { // the rest once the test saw the half
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(img[half:])
	}))
	t.Cleanup(srv.Close)
	slow := cnitestNet("slow", "ok")
	slow.Image, slow.Conf["verify"] = srv.URL+"/kurma-e2e.aci", "none"
	e.writeConfig([]netDef{slow}, nil)
	e.start()

	testutil.WaitFor(t, 30*time.Second, "slow's download to be under way", func() error {
		n, err := e.network("slow")
		if err != nil {
			return err
		}
		if n.State != api.StateFetching || n.FetchedBytes == 0 || n.FetchTotalBytes != int64(len(img)) || n.FetchStarted.IsZero() {
			return fmt.Errorf("slow: %+v", n)
		}
		return nil
	})
	if out := e.mustCtl("net", "ls"); !regexp.MustCompile(`slow +1 +fetching .*fetched [0-9.]+ [KM]iB of [0-9.]+ [KM]iB in \d+s`).MatchString(out) {
		t.Errorf("net ls does not show slow's download:\n%s", out)
	}
	once.Do(func() { close(release) })
	var n api.Generation
	testutil.WaitFor(t, 30*time.Second, "slow to run", func() error { return e.networkIn("slow", api.StateRunning, &n) })
	if n.FetchedBytes != 0 || !n.FetchStarted.IsZero() {
		t.Errorf("running generation %+v still shows a fetch", n)
	}
	e.stop()
	e.checkCleanStopped()
}
