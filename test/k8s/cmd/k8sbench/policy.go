package main

// The NetworkPolicy rows (K8S_NODES=2 or more, on each side while it is
// up): kurma's netpol image as the flannel manifest ships it against the
// same daemon run on the nodes directly (k8stest.DirectNetpol). Policies
// are created and deleted through the API server with the admin's client,
// timed from just before the request; what a pod sees comes from
// netbench's probe in a pod, whose attempts carry the machine's clock.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	k8stest "github.com/kurma-project/kurma/test/k8s"
)

// policyFigures are one round's NetworkPolicy figures on a side.
type policyFigures struct {
	deny, allow, revoke    time.Duration // a policy's request → the first new connection it refuses / accepts / refuses
	connectNone, connect50 float64       // new connections' p50 (µs) with no policy and with 50 selecting the server
	readyOff, readyOn      time.Duration // the Deployment 0→N until Ready without and with 50 policies selecting its pods
}

// policySide collects a side's rounds.
type policySide struct {
	name   string
	rounds []policyFigures
}

const (
	policyPods = `apiVersion: v1
kind: Pod
metadata: {name: pb-server, namespace: default, labels: {app: pb-server}}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers: [{name: s, image: %[3]s, command: ["/bin/netbench", "serve"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: pb-client, namespace: default, labels: {role: pb-client}}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: %[3]s, command: ["/bin/sleep", "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: pb-stranger, namespace: default, labels: {role: pb-stranger}}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: %[3]s, command: ["/bin/sleep", "3600"]}]
`
	policiesPath = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"
	probeEvery   = 5 * time.Millisecond
)

// policy is a NetworkPolicy selecting app=selected, letting in the pods
// labelled by each of from (none: nothing), labelled bench=policy.
func policy(name, selected string, from ...map[string]string) map[string]any {
	var peers []any
	for _, l := range from {
		peers = append(peers, map[string]any{"podSelector": map[string]any{"matchLabels": l}})
	}
	spec := map[string]any{"podSelector": map[string]any{"matchLabels": map[string]string{"app": selected}},
		"policyTypes": []string{"Ingress"}}
	if len(peers) > 0 {
		spec["ingress"] = []any{map[string]any{"from": peers, "ports": []any{map[string]any{"port": 5201, "protocol": "TCP"}}}}
	}
	return map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"bench": "policy"}}, "spec": spec}
}

// api sends one request to the API server as the admin.
func (b *bench) api(ctx context.Context, method, path string, body any) error {
	hc, err := b.c.AdminHTTP()
	if err != nil {
		return err
	}
	var r io.Reader
	if body != nil {
		bs, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(bs)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.c.APIServer+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}

// many creates n policies selecting app=selected, each letting in the
// client and a label of its own.
func (b *bench) many(ctx context.Context, n int, selected string) error {
	for i := range n {
		p := policy(fmt.Sprintf("many-%s-%d", selected, i), selected,
			map[string]string{"role": "pb-client"}, map[string]string{"peer": fmt.Sprint("p", i)})
		if err := b.api(ctx, "POST", policiesPath, p); err != nil {
			return err
		}
	}
	return nil
}

// dropPolicies deletes the bench's policies.
func (b *bench) dropPolicies(ctx context.Context) error {
	return b.api(ctx, "DELETE", policiesPath+"?labelSelector=bench%3Dpolicy", nil)
}

// connects runs netbench from pod to addr: n new connections' p50 (µs),
// or an error when one does not connect.
func (b *bench) connects(ctx context.Context, pod, addr string, n int) (float64, error) {
	out, err := b.c.Kubectl(ctx, "exec", pod, "--", "netbench", "connect", "-addr", addr, "-n", fmt.Sprint(n))
	if err != nil {
		return 0, err
	}
	var r struct {
		P50 float64 `json:"p50_us"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return 0, fmt.Errorf("netbench connect: %v: %s", err, out)
	}
	return r.P50, nil
}

// waitConnects waits until pod's connections to addr do (want) or do not
// connect.
func (b *bench) waitConnects(ctx context.Context, pod, addr string, want bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := b.connects(ctx, pod, addr, 1)
		if (err == nil) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s → %s: connects %t, want %t for a minute (%v)", pod, addr, err == nil, want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// policyRound measures the NetworkPolicy rows on the side that is up.
func (b *bench) policyRound(ctx context.Context) (f policyFigures, err error) {
	c := b.c
	first, last := c.Nodes[0].Name, c.Nodes[len(c.Nodes)-1].Name
	if err := b.apply(ctx, fmt.Sprintf(policyPods, last, first, k8stest.BusyboxImage)); err != nil {
		return f, err
	}
	defer func() {
		_ = b.dropPolicies(ctx)
		_, _ = c.Kubectl(ctx, "delete", "pod", "pb-server", "pb-client", "pb-stranger", "--wait=true", "--timeout=2m")
	}()
	for _, p := range []string{"pb-server", "pb-client", "pb-stranger"} {
		if _, err := c.Kubectl(ctx, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=3m"); err != nil {
			return f, err
		}
	}
	var server struct {
		Status struct {
			PodIP string `json:"podIP"`
		} `json:"status"`
	}
	if err := c.KubectlJSON(ctx, &server, "get", "pod", "pb-server"); err != nil {
		return f, err
	}
	addr := server.Status.PodIP + ":5201"
	if err := b.waitConnects(ctx, "pb-client", addr, true); err != nil {
		return f, err
	}

	// The first packet's cost: connects with no policy, then with 50
	// selecting the server (in force once the stranger is refused).
	if f.connectNone, err = b.connects(ctx, "pb-client", addr, 1000); err != nil {
		return f, err
	}
	if err := b.many(ctx, 50, "pb-server"); err != nil {
		return f, err
	}
	if err := b.waitConnects(ctx, "pb-stranger", addr, false); err != nil {
		return f, err
	}
	if f.connect50, err = b.connects(ctx, "pb-client", addr, 1000); err != nil {
		return f, err
	}
	if err := b.dropPolicies(ctx); err != nil {
		return f, err
	}
	if err := b.waitConnects(ctx, "pb-stranger", addr, true); err != nil {
		return f, err
	}

	if f.deny, f.allow, f.revoke, err = b.applyToEffect(ctx, addr); err != nil {
		return f, err
	}
	if err := b.dropPolicies(ctx); err != nil {
		return f, err
	}

	// Pods through the kubelet, without and with 50 policies selecting them.
	if f.readyOff, _, _, err = b.round(ctx); err != nil {
		return f, err
	}
	if err := b.many(ctx, 50, "bench"); err != nil {
		return f, err
	}
	if f.readyOn, _, _, err = b.round(ctx); err != nil {
		return f, err
	}
	return f, b.dropPolicies(ctx)
}

// applyToEffect runs netbench's probe from the client while a deny
// policy, then an allow policy, is created and the allow deleted again:
// each request's time to the first connection that shows it.
func (b *bench) applyToEffect(ctx context.Context, addr string) (deny, allow, revoke time.Duration, err error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.c.Kubectl(ctx, "exec", "pb-client", "--", "netbench", "probe", "-addr", addr, "-seconds", "9",
			"-every", probeEvery.String(), "-timeout", "300ms")
		done <- result{out, err}
	}()
	// The probe runs once kubectl exec has started it: give it a second.
	time.Sleep(1500 * time.Millisecond)
	steps := []struct {
		method, path string
		body         any
		want         bool
	}{
		{"POST", policiesPath, policy("pb-deny", "pb-server"), false},
		{"POST", policiesPath, policy("pb-allow", "pb-server", map[string]string{"role": "pb-client"}), true},
		{"DELETE", policiesPath + "/pb-allow", nil, false},
	}
	var at []time.Time
	for _, s := range steps {
		at = append(at, time.Now())
		if err := b.api(ctx, s.method, s.path, s.body); err != nil {
			return 0, 0, 0, err
		}
		time.Sleep(2500 * time.Millisecond)
	}
	r := <-done
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("netbench probe: %w", r.err)
	}
	var attempts []struct {
		Start int64 `json:"t"`
		OK    bool  `json:"ok"`
	}
	if err := json.Unmarshal([]byte(r.out), &attempts); err != nil {
		return 0, 0, 0, fmt.Errorf("netbench probe: %v: %.200s", err, r.out)
	}
	var ds []time.Duration
	for i, s := range steps {
		from, to := at[i].UnixNano(), int64(1<<62)
		if i+1 < len(at) {
			to = at[i+1].UnixNano()
		}
		// The first attempt from which every attempt until the next step
		// has the outcome the step wants.
		found := int64(-1)
		for _, a := range attempts {
			if a.Start < from || a.Start >= to {
				continue
			}
			if a.OK != s.want {
				found = -1
			} else if found < 0 {
				found = a.Start
			}
		}
		if found < 0 {
			return 0, 0, 0, fmt.Errorf("step %d (%s %s): no attempt in the %s after it shows it", i+1, s.method, s.path, time.Duration(to-from))
		}
		ds = append(ds, time.Duration(found-from))
	}
	return ds[0], ds[1], ds[2], nil
}

// reportPolicy prints the NetworkPolicy rows beside their anchors.
func reportPolicy(w io.Writer, replicas int, kurma, plain *policySide) {
	fmt.Fprintf(w, "\n## NetworkPolicy (kurma's netpol image vs the same daemon on the nodes; rounds interleaved; probe every %s)\n\n", probeEvery)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tkurma\tdirect\tgoal\tanchor\tmet")
	dur := func(s *policySide, f func(policyFigures) time.Duration) time.Duration {
		var v []time.Duration
		for _, r := range s.rounds {
			v = append(v, f(r))
		}
		return pct(v, 50)
	}
	num := func(s *policySide, f func(policyFigures) float64) float64 {
		var v []float64
		for _, r := range s.rounds {
			v = append(v, f(r))
		}
		return median(v)
	}
	yes := map[bool]string{true: "yes", false: "no"}
	n := len(kurma.rounds)
	for _, r := range []struct {
		name, anchor string
		goal         time.Duration
		f            func(policyFigures) time.Duration
	}{
		{"deny policy: request → first refused connection, p50", "~310–330 ms", 300 * time.Millisecond, func(p policyFigures) time.Duration { return p.deny }},
		{"allow policy: request → first accepted connection, p50", "~310–330 ms", 300 * time.Millisecond, func(p policyFigures) time.Duration { return p.allow }},
		{"revocation (allow deleted) → first refused connection, p50", "~2.3 s", time.Second, func(p policyFigures) time.Duration { return p.revoke }},
	} {
		k, d := dur(kurma, r.f), dur(plain, r.f)
		fmt.Fprintf(tw, "%s (n=%d)\t%s\t%s\t≤%s\t%s\t%s\n", r.name, n, ms(k), ms(d), r.goal, r.anchor, yes[k <= r.goal])
	}
	for _, s := range []*policySide{kurma, plain} {
		none, with := num(s, func(p policyFigures) float64 { return p.connectNone }), num(s, func(p policyFigures) float64 { return p.connect50 })
		fmt.Fprintf(tw, "%s: new connection p50, 50 policies vs none\t%.0f vs %.0f µs\t+%.3f ms\t≤+0.2 ms\t\t%s\n", s.name, with, none, (with-none)/1000, yes[(with-none)/1000 <= 0.2])
	}
	for _, s := range []*policySide{kurma, plain} {
		off, on := dur(s, func(p policyFigures) time.Duration { return p.readyOff }), dur(s, func(p policyFigures) time.Duration { return p.readyOn })
		r := float64(off) / float64(max(on, 1))
		fmt.Fprintf(tw, "%s: pods/s through the kubelet, 50 policies selecting them vs none (0→%d Ready)\t%s vs %s\t%.3f×\t≥0.95×\t\t%s\n", s.name, replicas, ms(on), ms(off), r, yes[r >= 0.95])
	}
	tw.Flush()
	for _, s := range []*policySide{kurma, plain} {
		var rows []string
		for _, r := range s.rounds {
			rows = append(rows, fmt.Sprintf("deny %s allow %s revoke %s", ms(r.deny), ms(r.allow), ms(r.revoke)))
		}
		fmt.Fprintf(w, "%s per round: %s\n", s.name, strings.Join(rows, "; "))
	}
}
