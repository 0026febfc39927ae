package podnet

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/cniresult"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/state"
)

// TestHostilePluginOutput: a plugin whose add exits 0 but prints something
// that is not a usable result (not JSON, huge, empty, a spec version that
// does not exist, a CNI error object, wrong types, dangling references)
// fails the create with a short error naming the network, and changes
// nothing: the rollback del ran for every network with its add's config,
// the new pod's netns and dir are gone, the journal holds only the pod that
// was there before, which is untouched, and the next create works.
func TestHostilePluginOutput(t *testing.T) {
	big := `{"cniVersion":"1.0.0","ips":[],"x":"` + strings.Repeat("a", cniresult.MaxSize) + `"}`
	tests := []struct {
		name string
		out  string
		msg  string // in the error; never empty: every row says what the user reads
		cni  bool   // a CNI error object (*types.Error) rather than ErrInvalid
		// bug, when set, is a known defect elsewhere that makes Create
		// accept this output: the case is skipped (with the pod deleted)
		// until it is fixed, then runs like the others.
		bug string
	}{
		{"not JSON", "Hello, I am a result", "not JSON", false, ""},
		{"binary", "\x00\x01\xff\xfe garbage \x1b[31m", "not JSON", false, ""},
		{"truncated JSON", `{"cniVersion":"1.0.0","ips":[{"address":"10.203.0.5/16"`, "not JSON", false, ""},
		{"cut at the output cap", big[:cniresult.MaxSize], "not JSON", false, ""},
		{"huge", big, "exceeds", false, ""},
		{"empty", "", "empty output", false, ""},
		{"whitespace only", " \n\t\n", "empty output", false, ""},
		{"JSON null", "null", "not a JSON object", false, ""},
		{"JSON array", `[{"cniVersion":"1.0.0"}]`, "not a JSON object", false, ""},
		{"JSON string", `"1.0.0"`, "not a JSON object", false, ""},
		{"deeply nested", strings.Repeat("[", 100000) + strings.Repeat("]", 100000), "not JSON", false, ""},
		{"unknown spec version", `{"cniVersion":"9.9.9","ips":[{"address":"10.203.0.5/16"}]}`, "9.9.9", false, ""},
		{"version not a string", `{"cniVersion":1.0,"ips":[]}`, `"cniVersion" must be a string`, false, ""},
		{"CNI error object, exit 0", `{"code":7,"msg":"no bridge here","details":"kt-pnet9"}`, "no bridge here", true, ""},
		{"CNI error object with version, exit 0", `{"cniVersion":"1.0.0","code":11,"msg":"try again later"}`, "try again later", true, ""},
		{"ips not a list", `{"cniVersion":"1.0.0","ips":"10.203.0.5/16"}`, "Result.ips of type", false, ""},
		{"address not an address", `{"cniVersion":"1.0.0","ips":[{"address":"ten dot two"}]}`, "invalid CIDR address: ten dot two", false, ""},
		{"address a number", `{"cniVersion":"1.0.0","ips":[{"address":10}]}`, "Result.ips.address of type string", false, ""},
		{"interface name a number", `{"cniVersion":"1.0.0","interfaces":[{"name":5}]}`, "interfaces.name of type string", false, ""},
		{"ip without address", `{"cniVersion":"1.0.0","ips":[{"gateway":"10.203.0.1"}]}`, "no address", false, ""},
		{"ip names a missing interface", `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1"}],"ips":[{"interface":3,"address":"10.203.0.5/16"}]}`, "interface 3", false, ""},
		{"null ip", `{"cniVersion":"1.0.0","ips":[null]}`, "null", false, ""},
		{"route without dst", `{"cniVersion":"1.0.0","routes":[{"gw":"10.203.0.1"}]}`, "no dst", false, ""},
		{"interface in another pod's netns", `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"/run/kurma/netns/0bad0000-0000-4000-8000-000000000000"}],"ips":[{"interface":0,"address":"10.203.251.5/16"}]}`, "not this pod's", false, ""},
		{"old version wrong shape", `{"cniVersion":"0.2.0","ip4":"10.203.0.5/16"}`, `version "0.2.0": json: cannot unmarshal string into Go struct field Result.ip4`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.msg == "" {
				t.Fatal("the row asserts no message")
			}
			fe := newFakeExec()
			f := newFixture(t, fe)
			// A pod made before must come through untouched.
			before, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha"}})
			if err != nil {
				t.Fatal(err)
			}
			fe.mu.Lock()
			fe.calls = nil
			fe.mu.Unlock()
			fe.on("add beta", func(call, context.Context) ([]byte, error) { return []byte(tt.out), nil })

			p, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta", "gamma"}})
			if err == nil && tt.bug != "" {
				for _, id := range []string{p.ID, before.ID} {
					if err := f.m.Delete(context.Background(), id); err != nil {
						t.Error(err)
					}
				}
				t.Skipf("known bug: %s", tt.bug)
			}
			if err == nil {
				t.Fatalf("Create succeeded with add output %.80q", tt.out)
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			if !strings.Contains(msg, `network "beta"`) || !strings.Contains(msg, netplugin.AddPath) || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %.300q should name network beta, %s and %q", msg, netplugin.AddPath, tt.msg)
			}
			if len(msg) > 1024 {
				t.Errorf("error is %d bytes long: the plugin's output should be quoted as an excerpt", len(msg))
			}
			if strings.ContainsAny(msg, "\x00\x1b\n") {
				t.Errorf("error carries raw control characters: %.300q", msg)
			}
			var cerr *types.Error
			if tt.cni {
				if !errors.As(err, &cerr) || !strings.Contains(cerr.Msg, tt.msg) {
					t.Errorf("error %v does not carry the plugin's CNI error", err)
				}
			} else if !errors.Is(err, cniresult.ErrInvalid) {
				t.Errorf("error %v does not wrap cniresult.ErrInvalid", err)
			}

			// The rollback: del beta (with add's config and args), del alpha;
			// gamma was never tried.
			if got, want := strings.Join(fe.seen(), ","), "add alpha,add beta,del beta,del alpha"; got != want {
				t.Errorf("calls = %s, want %s", got, want)
			}
			adds, dels := fe.callsFor("add beta"), fe.callsFor("del beta")
			if len(adds) == 1 && len(dels) == 1 {
				if dels[0].Stdin != adds[0].Stdin || strings.Join(dels[0].Args, " ") != strings.Join(adds[0].Args, " ") {
					t.Errorf("del beta %+v differs from its add %+v", dels[0], adds[0])
				}
				if _, err := os.Lstat(adds[0].Args[0]); !os.IsNotExist(err) {
					t.Errorf("the failed pod's netns %s is still there (%v)", adds[0].Args[0], err)
				}
			}
			if ids := f.onlyPodIDs(t); len(ids) != 1 || ids[0] != before.ID {
				t.Errorf("journal holds %v, want only the earlier pod %s", ids, before.ID)
			}
			if e, _ := os.ReadDir(f.netns); len(e) != 1 || e[0].Name() != before.ID {
				t.Errorf("netns dir holds %v, want only the earlier pod's", e)
			}
			f.m.Wait() // the failed pod's dir goes after the answer
			if e, _ := os.ReadDir(f.pods); len(e) > 1 {
				t.Errorf("pods dir holds %d entries", len(e))
			}
			if got, err := f.m.Get(before.ID); err != nil || got.Phase != state.PhaseReady || len(got.Attachments) != 1 || got.Attachments[0].Phase != state.AttachDone {
				t.Errorf("earlier pod after the hostile create: %+v, %v", got, err)
			}

			// The next create, with a sane plugin, works; then both go.
			fe.on("add beta", nil)
			p, err = f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha", "beta"}})
			if err != nil {
				t.Fatalf("create after the hostile output: %v", err)
			}
			for _, id := range []string{p.ID, before.ID} {
				if err := f.m.Delete(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				f.assertGone(t, id)
			}
		})
	}
}

// TestResultAddressHeld: an add whose result claims an address another
// attachment of its network holds (a plugin that lies, or an IPAM that
// hands one address out twice) fails the create naming the pod that holds
// it, and its del runs; the same address on another network is no clash.
func TestResultAddressHeld(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	fixed := func(c call, _ context.Context) ([]byte, error) {
		return []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"` + c.Args[2] + `","sandbox":"` + c.Args[0] + `"}],"ips":[{"interface":0,"address":"10.203.252.7/16"}]}`), nil
	}
	fe.on("add beta", fixed)
	first, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"beta"}})
	if err != nil {
		t.Fatal(err)
	}
	fe.mu.Lock()
	fe.calls = nil
	fe.mu.Unlock()
	_, err = f.m.Create(context.Background(), CreateRequest{Networks: []string{"beta"}})
	if !errors.Is(err, ErrForeignResult) || !strings.Contains(err.Error(), `network "beta"`) ||
		!strings.Contains(err.Error(), "10.203.252.7") || !strings.Contains(err.Error(), first.ID) {
		t.Fatalf("second create: %v; want ErrForeignResult naming network beta, the address and pod %s", err, first.ID)
	}
	if got, want := strings.Join(fe.seen(), ","), "add beta,del beta"; got != want {
		t.Errorf("calls = %s, want %s", got, want)
	}
	fe.on("add alpha", fixed)
	other, err := f.m.Create(context.Background(), CreateRequest{Networks: []string{"alpha"}})
	if err != nil {
		t.Fatalf("the same address on another network: %v", err)
	}
	for _, id := range []string{first.ID, other.ID} {
		if err := f.m.Delete(context.Background(), id); err != nil {
			t.Error(err)
		}
	}
}
