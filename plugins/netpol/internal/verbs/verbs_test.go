package verbs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func run(t *testing.T, verb, ready string) (int, map[string]any, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(verb, []string{"/run/kurma/netns/x", "uuid", "eth1"}, strings.NewReader(`{"name":"policy","cniVersion":"1.1.0","policy_networks":["podnet"]}`),
		&out, &errOut, func(network string) string {
			if network != "policy" {
				t.Errorf("readiness file asked for network %q", network)
			}
			return ready
		})
	var obj map[string]any
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
			t.Fatalf("%s: stdout is not JSON: %q", verb, out.String())
		}
	}
	return code, obj, errOut.String()
}

func TestVerbs(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "policy.ready")
	for _, verb := range []string{"add", "check"} {
		code, obj, stderr := run(t, verb, ready)
		if code != 1 || obj["code"] != float64(7) || obj["cniVersion"] != "1.1.0" ||
			obj["msg"] != `network "policy" enforces NetworkPolicy; pods do not attach to it` {
			t.Errorf("%s: exit %d, stdout %v", verb, code, obj)
		}
		if !strings.Contains(stderr, "pods do not attach") {
			t.Errorf("%s: stderr %q", verb, stderr)
		}
	}
	for _, verb := range []string{"del", "gc"} {
		if code, obj, _ := run(t, verb, ready); code != 0 || obj != nil {
			t.Errorf("%s: exit %d, stdout %v", verb, code, obj)
		}
	}

	code, obj, _ := run(t, "status", ready)
	if code != 1 || obj["code"] != float64(50) || !strings.Contains(obj["msg"].(string), "not enforcing yet") {
		t.Errorf("status without a readiness file: exit %d, %v", code, obj)
	}
	if err := os.WriteFile(ready, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, obj, _ := run(t, "status", ready); code != 0 || obj != nil {
		t.Errorf("status with the daemon ready: exit %d, %v", code, obj)
	}
	// A daemon killed before it removed its file.
	if err := os.WriteFile(ready, []byte("2147483646\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, obj, _ := run(t, "status", ready); code != 1 || !strings.Contains(obj["msg"].(string), "which is gone") {
		t.Errorf("status with a dead daemon's file: exit %d, %v", code, obj)
	}
	if code, _, _ := run(t, "setup", ready); code != 2 {
		t.Errorf("unknown verb: exit %d", code)
	}
}
