package k8stest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The restart storm measures the memory of kurma's container (kurma-node
// and kurmad: the plugin containers have cgroups of their own) for the
// manifest's requests and limit: stormPods pods on podnet, localnet and
// two Network objects, and stormRestarts deletions of kurma's pod back to
// back while a second Deployment scales up and down.
const (
	stormPods     = 30
	stormChurn    = 10
	stormRestarts = 10
)

// stormnet is a Network of the storm: a bridge with host-local.
func stormnet(name, bridge, subnet string) string {
	return fmt.Sprintf(`apiVersion: kurma.dev/v1alpha1
kind: Network
metadata: {name: %s}
spec:
  image: file:///opt/kurma/images/cni-netplugin.aci
  config:
    cniVersion: "1.0.0"
    type: bridge
    bridge: %s
    ipam: {type: host-local, subnet: %q}
`, name, bridge, subnet)
}

// stormDeploy is a Deployment of pause pods on every network of the storm.
func stormDeploy(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata:
      labels: {app: %[1]s}
      annotations: {kurma.dev/networks: "localnet,storm-a,storm-b"}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: pause, image: %[3]s}]
`, name, replicas, PauseImage)
}

// kurmaMemory is the memory of the container running kurma-node, as its
// cgroup counts it: the peak since the container started (cgroup v2
// memory.peak, v1 memory.max_usage_in_bytes, whichever the node has) and
// the VmHWM (peak RSS) of kurma-node and kurmad. pid 0: no such process.
type kurmaMemory struct {
	cgroupPeak         int64 // bytes
	cgroupFile         string
	nodeHWM, kurmadHWM int64 // bytes
	nodePID, kurmadPID int
	nodeRSS, kurmadRSS int64 // now
}

func readKurmaMemory(t *testing.T) kurmaMemory {
	t.Helper()
	var m kurmaMemory
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		hwm, rss := procStatusKB(d.Name(), "VmHWM:")*1024, procStatusKB(d.Name(), "VmRSS:")*1024
		switch {
		case strings.HasPrefix(string(cmd), "/opt/kurma/bin/kurma-node\x00run\x00"):
			m.nodePID, m.nodeHWM, m.nodeRSS = pid, hwm, rss
		case strings.HasPrefix(string(cmd), "/opt/kurma/bin/kurmad\x00"):
			m.kurmadPID, m.kurmadHWM, m.kurmadRSS = pid, hwm, rss
		}
	}
	if m.nodePID == 0 {
		return m
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", m.nodePID))
	if err != nil {
		return m
	}
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var candidates []string
		switch {
		case f[0] == "0" && f[1] == "":
			candidates = []string{filepath.Join("/sys/fs/cgroup", f[2], "memory.peak"), filepath.Join("/sys/fs/cgroup/unified", f[2], "memory.peak")}
		case strings.Contains(","+f[1]+",", ",memory,"):
			candidates = []string{filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.max_usage_in_bytes")}
		}
		for _, p := range candidates {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > m.cgroupPeak {
				m.cgroupPeak, m.cgroupFile = v, p
			}
		}
	}
	return m
}

// procStatusKB is a "kB" field of /proc/pid/status, 0 when absent.
func procStatusKB(pid, field string) int64 {
	st, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, field) {
			if f := strings.Fields(l); len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// measureRestartStorm: kurma's pod deleted stormRestarts times back to
// back, each time as soon as its successor is Ready, with stormPods pods
// attached to four networks and stormChurn more created or deleted at
// each deletion; it logs the peak memory of each of kurma's containers
// (read just before it is deleted, so covering its start, the journal's
// reconcile and the attaches it served) and the highest, the figures the
// manifest's memory request and limit rest on (docs/performance.md).
// It asserts only that the pods stay and the storm ends with every pod
// Ready: the figures are measurements, not pass marks.
func measureRestartStorm(t *testing.T, s *stepper, c *Cluster) {
	ctx := context.Background()
	s.step("restart storm: %d pods on 4 networks, kurma's pod deleted %d times while pods come and go", stormPods, stormRestarts)
	applyYAML(t, c, stormnet("storm-a", "kurma5", "172.27.0.0/16"))
	applyYAML(t, c, stormnet("storm-b", "kurma6", "172.26.0.0/16"))
	for _, n := range []string{"storm-a", "storm-b"} {
		waitFor(t, 2*time.Minute, n+" running", func() error {
			st, err := getRegStatus(c, n)
			if err != nil {
				return err
			}
			for _, e := range st.Status.Nodes {
				if e.State == "running" {
					return nil
				}
			}
			return fmt.Errorf("nodes %+v", st.Status.Nodes)
		})
	}
	applyYAML(t, c, stormDeploy("storm", stormPods))
	if _, err := c.Kubectl(ctx, "rollout", "status", "deploy/storm", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	before := podsByName(t, c, "app=storm")
	var peaks []kurmaMemory
	for i := 0; i < stormRestarts; i++ {
		m := readKurmaMemory(t)
		if m.cgroupFile == "" {
			t.Fatalf("kurma's container cgroup memory peak not found (kurma-node pid %d)", m.nodePID)
		}
		peaks = append(peaks, m)
		old := kurmadPod(t, c)
		churn := stormChurn
		if i%2 == 1 {
			churn = 0
		}
		applyYAML(t, c, stormDeploy("churn", churn))
		if _, err := c.Kubectl(ctx, "-n", "kurma-system", "delete", "pod", old, "--wait=false"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Minute, "a new kurma pod replacing "+old+", Ready", func() error {
			p := kurmadPod(t, c)
			if p == "" || p == old {
				return fmt.Errorf("kurma pod %q", p)
			}
			_, err := c.Kubectl(ctx, "-n", "kurma-system", "wait", "--for=condition=Ready", "pod/"+p, "--timeout=2s")
			return err
		})
	}
	if _, err := c.Kubectl(ctx, "rollout", "status", "deploy/churn", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	peaks = append(peaks, readKurmaMemory(t))
	var top kurmaMemory
	for i, m := range peaks {
		t.Logf("storm: kurma container %d: cgroup peak %s (%s); kurma-node VmHWM %s, kurmad VmHWM %s",
			i, mib(m.cgroupPeak), filepath.Base(m.cgroupFile), mib(m.nodeHWM), mib(m.kurmadHWM))
		top.cgroupPeak = max(top.cgroupPeak, m.cgroupPeak)
		top.nodeHWM, top.kurmadHWM = max(top.nodeHWM, m.nodeHWM), max(top.kurmadHWM, m.kurmadHWM)
	}
	t.Logf("storm: highest of %d kurma containers: cgroup peak %s, kurma-node VmHWM %s, kurmad VmHWM %s",
		len(peaks), mib(top.cgroupPeak), mib(top.nodeHWM), mib(top.kurmadHWM))
	if after := podsByName(t, c, "app=storm"); !equalMaps(after, before) {
		t.Errorf("after the storm storm's pods are %v, were %v", after, before)
	}
	if _, err := c.Kubectl(ctx, "delete", "deploy/storm", "deploy/churn", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "pods", "-l", "app in (storm,churn)", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "delete", "networks.kurma.dev", "storm-a", "storm-b", "--wait=true"); err != nil {
		t.Fatal(err)
	}
}
