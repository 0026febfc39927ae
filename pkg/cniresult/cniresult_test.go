package cniresult

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

const (
	res020 = `{"ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1","routes":[{"dst":"0.0.0.0/0"}]},"dns":{"nameservers":["10.1.0.1"]}}`
	res030 = `{"cniVersion":"0.3.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"version":"4","interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}`
	res031 = `{"cniVersion":"0.3.1","interfaces":[{"name":"veth1","mac":"aa:bb:cc:dd:ee:ff"},{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"version":"4","interface":1,"address":"10.1.0.5/16","gateway":"10.1.0.1"}]}`
	res040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"version":"6","interface":0,"address":"fd00::5/64"}],"dns":{"search":["example.com"]}}`
	res100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}]}`
	res110 = `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x","mtu":1400}],"ips":[{"interface":0,"address":"10.1.0.5/16"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}`
)

func TestParseVersions(t *testing.T) {
	tests := []struct {
		name, in   string
		wantIP     string
		wantIfname string
		wantDNS    bool
	}{
		{"0.1.0/0.2.0 without version", res020, "10.1.0.5/16", "", true},
		{"0.2.0 explicit", `{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/16"}}`, "10.1.0.5/16", "", false},
		{"0.1.0 explicit", `{"cniVersion":"0.1.0","ip4":{"ip":"10.1.0.5/16"}}`, "10.1.0.5/16", "", false},
		{"0.3.0", res030, "10.1.0.5/16", "eth0", false},
		{"0.3.1", res031, "10.1.0.5/16", "eth0", false},
		{"0.4.0", res040, "fd00::5/64", "eth0", true},
		{"1.0.0", res100, "10.1.0.5/16", "eth0", false},
		{"1.1.0", res110, "10.1.0.5/16", "eth0", false},
		{"surrounding whitespace", "\n  " + res110 + "\n\n", "10.1.0.5/16", "eth0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.in), "")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.CNIVersion != Version {
				t.Errorf("CNIVersion = %q, want %q", r.CNIVersion, Version)
			}
			if len(r.IPs) != 1 || r.IPs[0].Address.String() != tt.wantIP {
				t.Fatalf("IPs = %v, want one %s", r.IPs, tt.wantIP)
			}
			if got := sandboxInterface(r, "/run/netns/x"); got != tt.wantIfname {
				t.Errorf("interface in the sandbox = %q, want %q", got, tt.wantIfname)
			}
			if got := !r.DNS.IsEmpty(); got != tt.wantDNS {
				t.Errorf("DNS non-empty = %v, want %v (%+v)", got, tt.wantDNS, r.DNS)
			}
			// The normalized result must survive a round trip as 1.1.0.
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse(b, "")
			if err != nil {
				t.Fatalf("re-parse of %s: %v", b, err)
			}
			if again.IPs[0].Address.String() != tt.wantIP {
				t.Errorf("round trip changed IP: %s", b)
			}
		})
	}
}

// TestParseDeclaredVersion: a result without cniVersion is read as the
// version its config declared; the 0.1.0/0.2.0 shape, and any result when
// nothing was declared, as 0.1.0/0.2.0; a result's own cniVersion wins.
func TestParseDeclaredVersion(t *testing.T) {
	const (
		res031Bare = `{"interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"version":"4","interface":0,"address":"10.1.0.5/16"}]}`
		res100Bare = `{"interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"10.1.0.5/16"}]}`
	)
	tests := []struct {
		name, in, declared string
		wantIPs            int
	}{
		{"0.3.1 declared", res031Bare, "0.3.1", 1},
		{"1.0.0 declared", res100Bare, "1.0.0", 1},
		{"0.2.0 shape, 1.0.0 declared", res020, "1.0.0", 1},
		{"0.2.0 declared", res020, "0.2.0", 1},
		{"own version wins", res110, "0.2.0", 1},
		{"nothing declared: the 0.1.0/0.2.0 reading, which has no ips", res100Bare, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.in), tt.declared)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(r.IPs) != tt.wantIPs || (tt.wantIPs == 1 && r.IPs[0].Address.String() != "10.1.0.5/16") {
				t.Errorf("IPs = %v, want %d", r.IPs, tt.wantIPs)
			}
		})
	}
	if _, err := Parse([]byte(res100Bare), "9.9.9"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"9.9.9"`) {
		t.Errorf("unknown declared version: err = %v", err)
	}
}

// sandboxInterface is the first interface r places in the sandbox.
func sandboxInterface(r *current.Result, sandbox string) string {
	for _, itf := range r.Interfaces {
		if itf != nil && itf.Sandbox == sandbox {
			return itf.Name
		}
	}
	return ""
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     string
	}{
		{"empty", "", "empty output"},
		{"spaces", "  \n", "empty output"},
		{"not JSON", "hello, I am a plugin", "not JSON"},
		{"array", "[1,2]", "not a JSON object"},
		{"null", "null", "not a JSON object"},
		{"string", `"1.1.0"`, "not a JSON object"},
		{"version not a string", `{"cniVersion":1.1}`, `"cniVersion" must be a string`},
		{"code not a number", `{"code":"7","msg":"x"}`, `"code" must be a non-negative integer`},
		{"unknown version", `{"cniVersion":"9.9.9"}`, `"9.9.9"`},
		{"huge", `{"cniVersion":"1.1.0","x":"` + strings.Repeat("a", MaxSize) + `"}`, "exceeds"},
		{"bad interface index", `{"cniVersion":"1.1.0","ips":[{"interface":3,"address":"10.1.0.5/16"}]}`, "interface 3"},
		{"bad address", `{"cniVersion":"1.1.0","ips":[{"address":"nope"}]}`, "version"},
		{"null ip", `{"cniVersion":"1.1.0","ips":[null]}`, "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in), "")
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestParseCNIError(t *testing.T) {
	_, err := Parse([]byte(`{"cniVersion":"1.0.0","code":7,"msg":"bad config","details":"no bridge"}`), "")
	var cerr *types.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v does not wrap *types.Error", err)
	}
	if cerr.Code != 7 || cerr.Msg != "bad config" || cerr.Details != "no bridge" {
		t.Errorf("CNI error = %+v", cerr)
	}
	if !strings.Contains(err.Error(), "bad config") || !strings.Contains(err.Error(), "7") {
		t.Errorf("error text %q lacks code or message", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Error("a CNI error object must not be reported as ErrInvalid")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{res020, res030, res031, res040, res100, res110, "", "{}", "null", `{"code":1,"msg":"x"}`,
		`{"cniVersion":"9.9.9"}`, `{"cniVersion":"0.3.1","ips":[{"version":"4","interface":-1,"address":"1.2.3.4/8"}]}`,
		`{"ip4":{"ip":"10.0.0.1/8","routes":[null]},"ip6":{"ip":"::1/64"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Parse(in, "")
		if err != nil {
			if r != nil {
				t.Fatal("result and error both set")
			}
			return
		}
		if r.CNIVersion != Version {
			t.Fatalf("CNIVersion %q", r.CNIVersion)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal of accepted result: %v", err)
		}
		if _, err := Parse(b, ""); err != nil {
			t.Fatalf("accepted %q but not its normalized form %s: %v", in, b, err)
		}
	})
}
