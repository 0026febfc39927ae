package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/api"
)

// generations returns every generation kurmad lists, by "name/gen".
func (e *env) generations() map[string]api.Generation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nets, err := e.Client.Networks(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]api.Generation{}
	for _, n := range nets {
		out[fmt.Sprintf("%s/%d", n.Network, n.Generation)] = n
	}
	return out
}

// waitGenerations waits until kurmad lists exactly the generations of
// want ("name/gen" → state).
func (e *env) waitGenerations(what string, want map[string]string) map[string]api.Generation {
	e.t.Helper()
	var got map[string]api.Generation
	testutil.WaitFor(e.t, 60*time.Second, what, func() error {
		got = e.generations()
		states := map[string]string{}
		for k, n := range got {
			states[k] = n.State
		}
		if fmt.Sprint(states) != fmt.Sprint(want) {
			return fmt.Errorf("generations %v, want %v", states, want)
		}
		return nil
	})
	return got
}

// reload runs kurmactl reload -o json.
func (e *env) reload() api.ReloadResult {
	e.t.Helper()
	var res api.ReloadResult
	if out := e.mustCtl("reload", "-o", "json"); json.Unmarshal([]byte(out), &res) != nil {
		e.t.Fatalf("reload output: %s", out)
	}
	return res
}

// samePid checks that a generation kept its container: same pid, no restart.
func samePid(t *testing.T, what string, before, after api.Generation) {
	t.Helper()
	if after.Pid != before.Pid || after.Restarts != before.Restarts || after.Pid == 0 {
		t.Errorf("%s: pid %d restarts %d, want pid %d restarts %d: it must not be touched",
			what, after.Pid, after.Restarts, before.Pid, before.Restarts)
	}
}

// TestReload changes the config of a running kurmad: a network added is
// started and serves new pods while the others keep their containers; a
// network whose subnet changes gets a new generation for new pods while
// the old one deletes its pods with the old config, then stops; a network
// removed while in use retires and stops after its last pod; a file with
// problems changes nothing and names them all; SIGHUP reloads as kurmactl
// reload does.
func TestReload(t *testing.T) {
	e := newEnv(t)
	a := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "", true)
	b := cnitestNet("b", "ok")
	e.writeConfig([]netDef{a, b}, nil)
	e.start()
	boot := e.generations()
	pa := e.createPod("--net", "a")
	pb := e.createPod("--net", "b")

	// Add c.
	c := cnitestNet("c", "ok")
	e.writeConfig([]netDef{a, b, c}, nil)
	res := e.reload()
	if !slices.Equal(res.Added, []string{"c"}) || !slices.Equal(res.Unchanged, []string{"a", "b"}) || res.Config != e.Config {
		t.Errorf("reload adding c = %+v", res)
	}
	gens := e.waitGenerations("c to run", map[string]string{"a/1": "running", "b/1": "running", "c/1": "running"})
	samePid(t, "a after c was added", boot["a/1"], gens["a/1"])
	samePid(t, "b after c was added", boot["b/1"], gens["b/1"])
	pc := e.createPod("--net", "c")
	if len(pc.Attachments) != 1 || pc.Attachments[0].Network != "c" {
		t.Errorf("pod on the added network c: %+v", pc)
	}

	// Change a's subnet (and bridge: the bridge plugin refuses a bridge
	// whose gateway address is another subnet's), remove b.
	a2 := bridgeNet("a", "kt-e2e1", "10.205.0.0/16", "", true)
	e.writeConfig([]netDef{a2, c}, nil)
	res = e.reload()
	if !slices.Equal(res.Replaced, []string{"a"}) || !slices.Equal(res.Retired, []string{"b"}) || !slices.Equal(res.Unchanged, []string{"c"}) {
		t.Errorf("reload changing a and removing b = %+v", res)
	}
	gens = e.waitGenerations("a's generation 2 to serve", map[string]string{
		"a/2": "running", "a/1": "retiring", "b/1": "retiring", "c/1": "running"})
	samePid(t, "a's generation 1, retiring", boot["a/1"], gens["a/1"])
	samePid(t, "b, retiring", boot["b/1"], gens["b/1"])
	pa2 := e.createPod("--net", "a")
	if ip := podIPs(t, pa2)["a"]; !strings.HasPrefix(ip, "10.205.") {
		t.Errorf("new pod on a got %q, want the new subnet", ip)
	}
	if _, errOut, err := e.ctl("pod", "create", "--net", "b"); err == nil || !strings.Contains(errOut, `unknown network "b"`) {
		t.Errorf("create on the retired b: %v %s", err, errOut)
	}
	// The old pod is deleted with the old config, in the old generation:
	// its address in the old subnet is released. Then that generation stops.
	oldIP := podIPs(t, pa)["a"]
	e.mustCtl("pod", "rm", pa.ID)
	for _, l := range testutil.HostLocalLeases(e.StateDir) {
		if strings.HasSuffix(l, "/"+oldIP) {
			t.Errorf("lease of the deleted pod left: %s", l)
		}
	}
	e.waitGenerations("a's generation 1 to stop", map[string]string{"a/2": "running", "b/1": "retiring", "c/1": "running"})
	e.mustCtl("pod", "rm", pb.ID)
	gens = e.waitGenerations("b to stop", map[string]string{"a/2": "running", "c/1": "running"})

	// A file with problems changes nothing.
	if err := e.WriteConfig(map[string]any{"plugin_timeout": "forever",
		"pod_networks": []any{map[string]any{"name": "a", "type": "bridge"}}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := e.ctl("reload")
	if exitCode(err) != 2 || out != "" || !strings.Contains(errOut, "has 2 problem(s); nothing changed") ||
		!strings.Contains(errOut, "plugin_timeout: ") || !strings.Contains(errOut, "pod_networks[0].image: ") {
		t.Errorf("reload of a file with 2 problems: exit %d, stdout %q, stderr %q", exitCode(err), out, errOut)
	}
	e.writeConfig([]netDef{a2, c}, map[string]any{"state_dir": "/var/lib/elsewhere"})
	_, errOut, err = e.ctl("reload")
	if exitCode(err) != 2 || !strings.Contains(errOut, "state_dir: cannot change while kurmad runs") {
		t.Errorf("reload moving state_dir: exit %d, stderr %q", exitCode(err), errOut)
	}
	_, err = e.Client.Reload(context.Background())
	wantAPI(t, err, http.StatusBadRequest, api.CodeInvalidConfig, "state_dir")
	after := e.generations()
	for k, n := range gens {
		samePid(t, k+" after refused reloads", n, after[k])
	}
	if len(after) != len(gens) {
		t.Errorf("generations after refused reloads: %v, want %v", after, gens)
	}

	// SIGHUP.
	d := cnitestNet("d", "ok")
	e.writeConfig([]netDef{a2, c, d}, nil)
	if err := syscall.Kill(e.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e.waitGenerations("SIGHUP to add d", map[string]string{"a/2": "running", "c/1": "running", "d/1": "running"})
	e.writeConfig([]netDef{a2, c, d}, map[string]any{"run_dir": "/run/elsewhere"})
	if err := syscall.Kill(e.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "SIGHUP to refuse the moved run_dir", func() error {
		if err := e.SyncLog(5 * time.Second); err != nil {
			return err
		}
		if log := e.Log(); !strings.Contains(log, "config problem: run_dir: cannot change while kurmad runs") {
			return fmt.Errorf("not logged yet")
		}
		return nil
	})
	if !e.Running() {
		t.Fatal("kurmad exited on SIGHUP")
	}
	e.createPod("--net", "d")

	if n := len(e.listPods()); n != 3 {
		t.Errorf("%d pods listed, want pc, pa2 and d's", n)
	}
	for _, p := range e.listPods() {
		e.mustCtl("pod", "rm", p.ID)
	}
	e.checkCleanLive()
	e.stop()
	e.checkCleanStopped()
}

// TestReloadComparesMeaning: a config re-indented, its keys reordered,
// reloads as unchanged (each network keeps its container); a dry run says
// what a change would do, and which keys changed, applying nothing; the
// reload then replaces the network naming those keys, and a default
// flipped is an update naming it.
func TestReloadComparesMeaning(t *testing.T) {
	e := newEnv(t)
	a := bridgeNet("a", "kt-e2e0", "10.204.0.0/16", "", true)
	b := cnitestNet("b", "ok")
	e.writeConfig([]netDef{a, b}, nil)
	e.start()
	boot := e.generations()

	// The same config, laid out otherwise: tabs, each object's keys in
	// reverse, an escape for a letter.
	raw, err := os.ReadFile(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	relaid := strings.Replace(relayout(v, "\n"), `"host-local"`, `"host-\u006cocal"`, 1)
	if err := os.WriteFile(e.Config, []byte(relaid), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := e.reload(); len(res.Replaced)+len(res.Updated)+len(res.Added)+len(res.Retired) != 0 || !slices.Equal(res.Unchanged, []string{"a", "b"}) {
		t.Errorf("reload of the re-laid-out file = %+v, want a and b unchanged\n%s", res, relaid)
	}
	gens := e.generations()
	samePid(t, "a after the re-layout", boot["a/1"], gens["a/1"])
	samePid(t, "b after the re-layout", boot["b/1"], gens["b/1"])

	// A dry run of a new subnet: the plan, the keys, nothing applied.
	a2 := bridgeNet("a", "kt-e2e1", "10.205.0.0/16", "", true)
	e.writeConfig([]netDef{a2, b}, nil)
	var plan api.ReloadResult
	if out := e.mustCtl("reload", "--dry-run", "-o", "json"); json.Unmarshal([]byte(out), &plan) != nil {
		t.Fatalf("reload --dry-run -o json: %s", out)
	}
	if !plan.DryRun || !slices.Equal(plan.Replaced, []string{"a"}) || !slices.Equal(plan.Unchanged, []string{"b"}) ||
		!slices.Equal(plan.Changes["a"], []string{"bridge", "ipam.subnet"}) {
		t.Errorf("dry run = %+v", plan)
	}
	table := e.mustCtl("reload", "--dry-run")
	if !strings.Contains(table, "replaced (bridge, ipam.subnet): a new generation starts") || !strings.Contains(table, "dry run: nothing was applied") {
		t.Errorf("reload --dry-run:\n%s", table)
	}
	gens = e.generations()
	if len(gens) != 2 {
		t.Errorf("generations after the dry run: %v", gens)
	}
	samePid(t, "a after the dry run", boot["a/1"], gens["a/1"])

	res := e.reload()
	if res.DryRun || !slices.Equal(res.Replaced, []string{"a"}) || !slices.Equal(res.Changes["a"], []string{"bridge", "ipam.subnet"}) {
		t.Errorf("reload = %+v", res)
	}
	e.waitGenerations("a's generation 2 to serve", map[string]string{"a/2": "running", "b/1": "running"})
	b.Default = true
	e.writeConfig([]netDef{a2, b}, nil)
	if res := e.reload(); !slices.Equal(res.Updated, []string{"b"}) || !slices.Equal(res.Changes["b"], []string{"default"}) {
		t.Errorf("reload making b a default = %+v", res)
	}
	if out := e.mustCtl("reload", "--dry-run"); !strings.Contains(out, "unchanged") {
		t.Errorf("dry run of the applied file:\n%s", out)
	}
	e.stop()
	e.checkCleanStopped()
}

// relayout writes v as JSON with tabs, each object's keys in reverse
// order.
func relayout(v any, nl string) string {
	var b strings.Builder
	var write func(v any, indent string)
	write = func(v any, indent string) {
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(maps.Keys(v))
			slices.Reverse(keys)
			b.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(nl + indent + "\t" + strconv.Quote(k) + ":   ")
				write(v[k], indent+"\t")
			}
			b.WriteString(nl + indent + "}")
		case []any:
			b.WriteString("[ ")
			for i, e := range v {
				if i > 0 {
					b.WriteString(" , ")
				}
				write(e, indent)
			}
			b.WriteString(" ]")
		default:
			j, _ := json.Marshal(v)
			b.Write(j)
		}
	}
	write(v, "")
	return b.String()
}

// wantAPI checks that err is an *api.Error with that status and code and a
// message containing msg.
func wantAPI(t *testing.T, err error, status int, code, msg string) {
	t.Helper()
	if !api.IsCode(err, code) {
		t.Errorf("err = %v, want code %s", err, code)
		return
	}
	ae := err.(*api.Error)
	if ae.Status != status || !strings.Contains(ae.Message, msg) {
		t.Errorf("err = %d %q, want %d mentioning %q", ae.Status, ae.Message, status, msg)
	}
}
