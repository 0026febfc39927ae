package netconfig

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// wantProblem is a problem a bad config must report: the exact path and a
// piece of the message.
type wantProblem struct{ path, msg string }

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	return verr.Problems
}

func TestParseBad(t *testing.T) {
	const net = `"name": "mynet", "image": "file:///x.aci", "type": "bridge"`
	tests := []struct {
		name string
		json string
		want []wantProblem
	}{
		{"syntax error", "{\n  \"pod_networks\": [\n    {\"name\": \"a\",}\n  ]\n}",
			[]wantProblem{{"", "invalid JSON at line 3:"}}},
		{"syntax error column", `{"a" 1}`, []wantProblem{{"", "invalid JSON at line 1:6"}}},
		{"truncated", "{\n\"pod_networks\": [", []wantProblem{{"", "invalid JSON at line 2:"}}},
		{"empty document", "", []wantProblem{{"", "invalid JSON at line 1:1"}}},
		{"trailing garbage", `{} {}`, []wantProblem{{"", "invalid JSON at line 1:4"}}},
		{"not an object", `[1]`, []wantProblem{{"", "must be a JSON object"}}},
		{"unknown key close", `{"pod_network": []}`,
			[]wantProblem{{"pod_network", `unknown key; did you mean "pod_networks"?`}}},
		{"unknown key camel", `{"stateDir": "/x"}`,
			[]wantProblem{{"stateDir", `did you mean "state_dir"?`}}},
		{"unknown key far", `{"colour": 1}`,
			[]wantProblem{{"colour", `unknown key; known keys are "pod_networks"`}}},
		{"both spellings", `{"pod_networks": [], "podNetworks": []}`,
			[]wantProblem{{"podNetworks", `both "pod_networks" and "podNetworks" are set; use only "pod_networks"`}}},
		{"duplicate top-level key", `{"run_dir": "/a", "run_dir": "/b"}`,
			[]wantProblem{{"run_dir", "appears more than once"}}},
		{"networks not a list", `{"pod_networks": {}}`,
			[]wantProblem{{"pod_networks", "expected a list of network objects"}}},
		{"network not an object", `{"pod_networks": [3]}`,
			[]wantProblem{{"pod_networks[0]", "expected a network object"}}},
		{"missing name and image", `{"pod_networks": [{"type": "bridge"}]}`,
			[]wantProblem{{"pod_networks[0].name", "missing"}, {"pod_networks[0].image", "missing"}}},
		{"name wrong type", `{"pod_networks": [{"name": 5, "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", "expected a string"}}},
		{"name empty", `{"pod_networks": [{"name": "", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", "must not be empty"}}},
		{"name starting with a dot", `{"pod_networks": [{"name": ".MyNet", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `".MyNet" is not a valid network name; use letters, digits, '_', '.' and '-', starting with a letter or digit (CNI's rule; e.g. "MyNet")`}}},
		{"name dot dot", `{"pod_networks": [{"name": "..", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `".." is not a valid network name`}}},
		{"name starting with a dash", `{"pod_networks": [{"name": "-net", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `(CNI's rule; e.g. "net")`}}},
		{"name slash", `{"pod_networks": [{"name": "a/b", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `"a/b" is not a valid network name`}}},
		{"name colon", `{"pod_networks": [{"name": "a:b", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `(CNI's rule; e.g. "a-b")`}}},
		{"name comma", `{"pod_networks": [{"name": "a,b", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `"a,b" is not a valid network name`}}},
		{"name plus", `{"pod_networks": [{"name": "a+b", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `"a+b" is not a valid network name`}}},
		{"name non-ASCII", `{"pod_networks": [{"name": "réseau", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", `"réseau" is not a valid network name`}}},
		{"names differing only in case", `{"pod_networks": [{"name": "net", "image": "file:///x"}, {"name": "b", "image": "file:///x"}, {"name": "NET", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[2].name", `"NET" and "net" (pod_networks[0]) differ only in case; network names must differ in more than case`}}},
		{"name too long", `{"pod_networks": [{"name": "` + strings.Repeat("a", 64) + `", "image": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].name", "is 64 characters long; use at most 63"}}},
		{"duplicate name", `{"pod_networks": [{` + net + `}, {"name": "b", "image": "file:///x"}, {` + net + `}]}`,
			[]wantProblem{{"pod_networks[2].name", `"mynet" is used twice (also pod_networks[0])`}}},
		{"duplicate key in entry", `{"pod_networks": [{` + net + `, "type": "ptp"}]}`,
			[]wantProblem{{"pod_networks[0].type", "appears more than once in this network"}}},
		{"image and its former name aci", `{"pod_networks": [{"name": "a", "image": "file:///x", "aci": "file:///x"}]}`,
			[]wantProblem{{"pod_networks[0].aci", `both "image" and "aci"`}}},
		{"aci, the former name of image, checked as image", `{"pod_networks": [{"name": "a", "aci": "ftp://host/x.aci"}]}`,
			[]wantProblem{{"pod_networks[0].aci", `unsupported scheme "ftp"`}}},
		{"plain http under aci names aci", `{"pod_networks": [{"name": "a", "aci": "http://img.example/x.aci"}]}`,
			[]wantProblem{{"pod_networks[0].aci", `plain http://`}}},
		{"image wrong type", `{"pod_networks": [{"name": "a", "image": ["x"]}]}`,
			[]wantProblem{{"pod_networks[0].image", "expected a string"}}},
		{"image empty", `{"pod_networks": [{"name": "a", "image": ""}]}`,
			[]wantProblem{{"pod_networks[0].image", "must not be empty"}}},
		{"image bad scheme", `{"pod_networks": [{"name": "a", "image": "ftp://host/x.aci"}]}`,
			[]wantProblem{{"pod_networks[0].image", `unsupported scheme "ftp"`}}},
		{"image file without slashes", `{"pod_networks": [{"name": "a", "image": "file:/x.aci"}]}`,
			[]wantProblem{{"pod_networks[0].image", `missing the "//" after the scheme`}}},
		{"image file empty", `{"pod_networks": [{"name": "a", "image": "file://"}]}`,
			[]wantProblem{{"pod_networks[0].image", `does not name a file`}}},
		{"image http no host", `{"pod_networks": [{"name": "a", "image": "https:///x.aci"}]}`,
			[]wantProblem{{"pod_networks[0].image", `needs a host`}}},
		{"image docker bad", `{"pod_networks": [{"name": "a", "image": "docker://Kurma/Net"}]}`,
			[]wantProblem{{"pod_networks[0].image", `not a valid docker image reference`}}},
		{"image appc uppercase", `{"pod_networks": [{"name": "a", "image": "Example.com/net:v1"}]}`,
			[]wantProblem{{"pod_networks[0].image", `not an appc image name`}}},
		{"image appc bad label", `{"pod_networks": [{"name": "a", "image": "example.com/net:v1,os"}]}`,
			[]wantProblem{{"pod_networks[0].image", `label "os" must be written as name=value`}}},
		{"image absolute path without scheme", `{"pod_networks": [{"name": "a", "image": "/var/lib/kurma/net.aci"}]}`,
			[]wantProblem{{"pod_networks[0].image", `has no scheme; did you mean "file:///var/lib/kurma/net.aci"?`}}},
		{"image relative path without scheme", `{"pod_networks": [{"name": "a", "image": "net.aci"}]}`,
			[]wantProblem{{"pod_networks[0].image", `did you mean "file:///etc/kurma/net.aci"?`}}},
		{"two defaults on one fixed interface", `{"pod_networks": [{"name": "a", "image": "file:///x", "default": true, "containerInterface": "eth0"},
			{"name": "b", "image": "file:///x", "containerInterface": "eth0"}, {"name": "c", "image": "file:///x", "default": true, "containerInterface": "{{if true}}eth0{{end}}"}]}`,
			[]wantProblem{{"pod_networks[2].containerInterface", `"eth0" is also the interface of default network "a" (pod_networks[0])`}}},
		{"UTF-16", "\xff\xfe{\x00}\x00", []wantProblem{{"", "the file is UTF-16"}}},
		{"plugin config over the agent's cap", `{"pod_networks": [{"name": "a", "image": "file:///x", "pad": "` + strings.Repeat("x", netplugin.MaxConfigSize) + `"}]}`,
			[]wantProblem{{"pod_networks[0]", "a plugin's config may be at most 4194304 bytes"}}},
		{"image whitespace", `{"pod_networks": [{"name": "a", "image": "example.com/ net"}]}`,
			[]wantProblem{{"pod_networks[0].image", `contains whitespace`}}},
		{"default wrong type", `{"pod_networks": [{"name": "a", "image": "file:///x", "default": "yes"}]}`,
			[]wantProblem{{"pod_networks[0].default", "expected a boolean (true or false), got a string"}}},
		{"allow_capabilities not a list", `{"pod_networks": [{"name": "a", "image": "file:///x", "allow_capabilities": "CAP_BPF"}]}`,
			[]wantProblem{{"pod_networks[0].allow_capabilities", `expected a list of capability names such as ["CAP_BPF", "CAP_SYS_MODULE"], got a string`}}},
		{"allow_capabilities element not a string", `{"pod_networks": [{"name": "a", "image": "file:///x", "allow_capabilities": [7]}]}`,
			[]wantProblem{{"pod_networks[0].allow_capabilities[0]", "expected a string, got a number"}}},
		{"allow_capabilities bad names", `{"pod_networks": [{"name": "a", "image": "file:///x", "allow_capabilities": ["bpf", "CAP_SYS_MODUEL", "CAP_NOPE_NOPE_NOPE", "CAP_BPF", "CAP_BPF"]}]}`,
			[]wantProblem{
				{"pod_networks[0].allow_capabilities[0]", `"bpf" is not a Linux capability name; did you mean "CAP_BPF"?`},
				{"pod_networks[0].allow_capabilities[1]", `"CAP_SYS_MODUEL" is not a Linux capability name; did you mean "CAP_SYS_MODULE"?`},
				{"pod_networks[0].allow_capabilities[2]", `"CAP_NOPE_NOPE_NOPE" is not a Linux capability name; write it as the kernel does, e.g. "CAP_NET_ADMIN"`},
				{"pod_networks[0].allow_capabilities[4]", `"CAP_BPF" is listed twice; keep one`},
			}},
		{"allow_capabilities misspelt", `{"pod_networks": [{"name": "a", "image": "file:///x", "allowCapabilities": ["CAP_BPF"]}]}`,
			[]wantProblem{{"pod_networks[0].allowCapabilities", `did you mean "allow_capabilities"?`}}},
		{"kurma key misspelt", `{"pod_networks": [{"name": "a", "image": "file:///x", "container_interface": "eth0"}]}`,
			[]wantProblem{{"pod_networks[0].container_interface", `did you mean "containerInterface"?`}}},
		// A slip of a letter in one of kurma's keys is not taken for a
		// key of the plugin's.
		{"kurma key with two letters swapped", `{"pod_networks": [{"name": "a", "image": "file:///x", "defualt": true}]}`,
			[]wantProblem{{"pod_networks[0].defualt", `did you mean "default"?`}}},
		{"kurma key with a letter missing", `{"pod_networks": [{"name": "a", "image": "file:///x", "limts": {}}]}`,
			[]wantProblem{{"pod_networks[0].limts", `did you mean "limits"?`}}},
		{"kurma key with a wrong letter", `{"pod_networks": [{"name": "a", "image": "file:///x", "verifi": "none"}]}`,
			[]wantProblem{{"pod_networks[0].verifi", `did you mean "verify"?`}}},
		{"long kurma key with two slips", `{"pod_networks": [{"name": "a", "image": "file:///x", "allow_capabilites": []}]}`,
			[]wantProblem{{"pod_networks[0].allow_capabilites", `did you mean "allow_capabilities"?`}}},
		{"template wrong type", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": 0}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", "expected a string template"}}},
		{"template empty", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": ""}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", "must not be empty"}}},
		{"template syntax", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "eth{{num"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", "template error:"}}},
		{"template unknown func", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{nope}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `function "nope" not defined`}}},
		{"template too long", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "verylonginterface{{num}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `"verylonginterface0" is 18 bytes long; interface names are at most 15`}}},
		{"template uuid too long", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{uuid}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `use shortuuid or random N rather than uuid`}}},
		{"template bad char", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "eth:{{num}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `contains ':'`}}},
		{"template dot", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": ".."}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `".." is not allowed`}}},
		{"template random too big", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{random 16}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `random 16: N must be between 1 and 15`}}},
		{"template random zero", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "e{{random 0}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `random 0: N must be between 1 and 15`}}},
		{"template range", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{range 3}}e{{end}}"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `is not allowed in an interface name template`}}},
		{"template define", `{"pod_networks": [{"name": "a", "image": "file:///x", "containerInterface": "{{define \"x\"}}a{{end}}e"}]}`,
			[]wantProblem{{"pod_networks[0].containerInterface", `may not define other templates`}}},
		{"cniVersion wrong type", `{"pod_networks": [{"name": "a", "image": "file:///x", "cniVersion": 1}]}`,
			[]wantProblem{{"pod_networks[0].cniVersion", "expected a version string"}}},
		{"cniVersion empty", `{"pod_networks": [{"name": "a", "image": "file:///x", "cniVersion": ""}]}`,
			[]wantProblem{{"pod_networks[0].cniVersion", "must not be empty"}}},
		{"args not object", `{"pod_networks": [{"name": "a", "image": "file:///x", "args": []}]}`,
			[]wantProblem{{"pod_networks[0].args", `expected an object such as {"cni": {...}}`}}},
		{"args.cni not object", `{"pod_networks": [{"name": "a", "image": "file:///x", "args": {"cni": "x"}}]}`,
			[]wantProblem{{"pod_networks[0].args.cni", `expected an object of per-pod arguments, got a string`}}},
		{"plugin_timeout wrong type", `{"plugin_timeout": 60}`,
			[]wantProblem{{"plugin_timeout", `expected a Go duration string such as "1m" or "30s", got a number`}}},
		{"plugin_timeout bad", `{"plugin_timeout": "1 minute"}`,
			[]wantProblem{{"plugin_timeout", `"1 minute" is not a duration`}}},
		{"plugin_timeout zero", `{"plugin_timeout": "0s"}`,
			[]wantProblem{{"plugin_timeout", `must be greater than zero`}}},
		{"plugin_timeout negative", `{"plugin_timeout": "-1m"}`,
			[]wantProblem{{"plugin_timeout", `must be greater than zero`}}},
		{"state_dir relative", `{"state_dir": "var/lib/kurma"}`,
			[]wantProblem{{"state_dir", `"var/lib/kurma" must be an absolute path such as "/var/lib/kurma"`}}},
		{"run_dir empty", `{"run_dir": ""}`,
			[]wantProblem{{"run_dir", `must be an absolute path such as "/run/kurma"`}}},
		{"run_dir null", `{"run_dir": null}`,
			[]wantProblem{{"run_dir", `got null`}}},
		{"cgroup_parent absolute", `{"cgroup_parent": "/kurma"}`,
			[]wantProblem{{"cgroup_parent", `must be a cgroup path relative to the root of the hierarchies`}}},
		{"cgroup_parent dot-dot", `{"cgroup_parent": "kurma/../x"}`,
			[]wantProblem{{"cgroup_parent", `has an empty, "." or ".." part`}}},
		{"cgroup_parent number", `{"cgroup_parent": 1}`,
			[]wantProblem{{"cgroup_parent", `expected a string`}}},
		{"kubernetes_credentials string", `{"pod_networks": [{"name": "a", "image": "file:///a", "kubernetes_credentials": "yes"}]}`,
			[]wantProblem{{"pod_networks[0].kubernetes_credentials", `expected a boolean`}}},
		{"insecure_registries wrong type", `{"insecure_registries": "localhost:5000"}`,
			[]wantProblem{{"insecure_registries", `expected a list of "host:port" strings`}}},
		{"insecure_registries element type", `{"insecure_registries": ["ok:1", 5]}`,
			[]wantProblem{{"insecure_registries[1]", `expected a string, got a number`}}},
		{"insecure_registries bad entries", `{"insecure_registries": ["http://r:5000", "r:0", "r:x", "", "bad_host:5000", "a b"]}`,
			[]wantProblem{
				{"insecure_registries[0]", `has a scheme; drop it`},
				{"insecure_registries[1]", `invalid port "0"`},
				{"insecure_registries[2]", `invalid port "x"`},
				{"insecure_registries[3]", `must not be empty`},
				{"insecure_registries[4]", `invalid host name`},
				{"insecure_registries[5]", `not a registry address`},
			}},
		{"trusted_keys wrong type", `{"trusted_keys": {}}`,
			[]wantProblem{{"trusted_keys", `expected a list such as`}}},
		{"trusted_keys entries", `{"trusted_keys": [1, {"prefix": "a b", "key": ""}, {"prefx": "a", "key": "k"}, {}]}`,
			[]wantProblem{
				{"trusted_keys[0]", `expected an object`},
				{"trusted_keys[1].prefix", `is not an image name prefix; write one such as "example.com/kurma", or "" for every name`},
				{"trusted_keys[1].key", `must name an armored OpenPGP public key file`},
				{"trusted_keys[2].prefx", `did you mean "prefix"?`},
				{"trusted_keys[2].prefix", `missing`},
				{"trusted_keys[3].prefix", `missing`},
				{"trusted_keys[3].key", `missing`},
			}},
		{"insecure_discovery wrong type", `{"insecure_discovery": "true"}`,
			[]wantProblem{{"insecure_discovery", `expected a boolean`}}},
		{"verify bad", `{"verify": "always", "trusted_keys": [{"prefix": "", "key": "k"}]}`,
			[]wantProblem{{"verify", `"always" is not a verify mode; use one of "required", "if-signed" or "none"`}}},
		{"verify wrong type", `{"verify": true}`,
			[]wantProblem{{"verify", `expected a string, one of "required", "if-signed" or "none", got a boolean`}}},
		{"verify required with nothing to verify with", `{"verify": "required", "pod_networks": [
			{"name": "a", "image": "file:///a.aci"},
			{"name": "b", "image": "file:///b.aci", "verify": "required"},
			{"name": "c", "image": "file:///c.aci", "verify": "none"}]}`,
			[]wantProblem{
				{"verify", `"required" needs something to verify images with; add trusted_keys (for ACIs) or signature_policy`},
				{"pod_networks[1].verify", `"required" needs something to verify images with`},
			}},
		{"network verify and image_name bad", `{"pod_networks": [
			{"name": "a", "image": "file:///a.aci", "verify": "maybe", "image_name": "Example.com/Net"},
			{"name": "b", "image": "file:///b.aci", "verify": 1, "image_name": "example.com/net:v1"},
			{"name": "c", "image": "file:///c.aci", "image_name": ""},
			{"name": "d", "image": "file:///d.aci", "image-name": "x", "Verify": "none"}]}`,
			[]wantProblem{
				{"pod_networks[0].verify", `"maybe" is not a verify mode`},
				{"pod_networks[0].image_name", `"Example.com/Net" is not an image name`},
				{"pod_networks[1].verify", `expected a string`},
				{"pod_networks[1].image_name", `"example.com/net:v1" is not an image name; write the name the image must carry`},
				{"pod_networks[2].image_name", `must not be empty`},
				{"pod_networks[3].image-name", `did you mean "image_name"?`},
				{"pod_networks[3].Verify", `did you mean "verify"?`},
			}},
		{"signature_policy and registries_d bad", `{"signature_policy": "", "registries_d": 3}`,
			[]wantProblem{
				{"signature_policy", `must name a containers-policy.json file`},
				{"registries_d", `expected a string (the path of a containers-registries.d directory), got a number`},
			}},
		{"max_image_size bad", `{"max_image_size": "2GiB"}`,
			[]wantProblem{{"max_image_size", `expected a whole number of bytes such as 2147483648, got a string`}}},
		{"max_image_size zero", `{"max_image_size": 0}`,
			[]wantProblem{{"max_image_size", `0 must be greater than zero`}}},
		{"max_image_size fraction", `{"max_image_size": 1.5}`,
			[]wantProblem{{"max_image_size", `expected a whole number of bytes`}}},
		{"fetch_timeout bad", `{"fetch_timeout": "-1m"}`,
			[]wantProblem{{"fetch_timeout", `must be greater than zero`}}},
		{"intervals bad", `{"gc_interval": "-1m", "check_interval": "often", "status_interval": "0s", "runtime_check_interval": 30}`,
			[]wantProblem{
				{"gc_interval", `"-1m" is negative`},
				{"check_interval", `"often" is not a duration`},
				{"status_interval", `must be greater than zero`},
				{"runtime_check_interval", `expected a Go duration string such as "10m", or "0s" for never, got a number`},
			}},
		{"metrics_listen bad", `{"metrics_listen": "9410"}`,
			[]wantProblem{{"metrics_listen", `"9410" is neither "host:port"`}}},
		{"metrics_listen port", `{"metrics_listen": "127.0.0.1:99999"}`,
			[]wantProblem{{"metrics_listen", `port 99999 is out of range`}}},
		{"metrics_listen name", `{"metrics_listen": "metrics.example.com:9410"}`,
			[]wantProblem{{"metrics_listen", `must be an IP address or localhost`}}},
		{"redact_keys bad", `{"redact_keys": ["password", "", "password", 3]}`,
			[]wantProblem{
				{"redact_keys[3]", `expected a string`},
			}},
		{"redact_keys empty and twice", `{"redact_keys": ["password", "", "password"]}`,
			[]wantProblem{
				{"redact_keys[1]", `an empty key`},
				{"redact_keys[2]", `"password" is listed twice`},
			}},
		{"all problems at once", `{
			"pod_network": [],
			"plugin_timeout": "soon",
			"pod_networks": [
				{"name": "mynet", "image": "file:///a.aci"},
				{"name": "Bad Name", "image": "ftp://x"},
				{"name": "mynet", "image": "file:///b.aci", "containerInterface": "{{"}
			]}`,
			[]wantProblem{
				{"pod_network", `did you mean "pod_networks"?`},
				{"plugin_timeout", `"soon" is not a duration`},
				{"pod_networks[1].name", `"Bad Name" is not a valid network name`},
				{"pod_networks[1].image", `unsupported scheme "ftp"`},
				{"pod_networks[2].containerInterface", `template error`},
				{"pod_networks[2].name", `"mynet" is used twice (also pod_networks[0])`},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.json), "/etc/kurma")
			if err == nil {
				t.Fatalf("Parse succeeded (%+v); want problems %v", cfg, tt.want)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config along with the error")
			}
			got := problemsOf(t, err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if got[i].Path != w.path || !strings.Contains(got[i].Msg, w.msg) {
					t.Errorf("problem %d = %q; want path %q and message containing %q", i, got[i], w.path, w.msg)
				}
			}
			// Error() is one line per problem, "path: msg".
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(got) {
				t.Errorf("Error() has %d lines for %d problems:\n%s", len(lines), len(got), err)
			}
			for i, p := range got {
				if p.Path != "" && !strings.HasPrefix(lines[i], p.Path+": ") {
					t.Errorf("line %d = %q; want it to start with %q", i, lines[i], p.Path+": ")
				}
			}
		})
	}
}

func TestParseErrorLine(t *testing.T) {
	_, err := Parse([]byte(`{"pod_networks": [{"name": "mynet", "image": "file:///x"}, {"name": "mynet", "image": "file:///y"}]}`), "/")
	const want = `pod_networks[1].name: "mynet" is used twice (also pod_networks[0]); network names must be unique`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %s", err, want)
	}
}

func TestParseGood(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(t *testing.T, c *Config)
	}{
		{"empty object gives defaults", `{}`, func(t *testing.T, c *Config) {
			want := &Config{PluginTimeout: time.Minute, StateDir: "/var/lib/kurma", RunDir: "/run/kurma",
				GCInterval: 10 * time.Minute, StatusInterval: 30 * time.Second,
				RuntimeCheckInterval: 30 * time.Second}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got %+v; want %+v", c, want)
			}
		}},
		{"empty networks", `{"pod_networks": []}`, func(t *testing.T, c *Config) {
			if len(c.Networks) != 0 || len(c.Defaults()) != 0 || len(c.Names()) != 0 {
				t.Errorf("networks = %v", c.Names())
			}
		}},
		{"camel case key", `{"podNetworks": [{"name": "a", "image": "file:///a.aci"}]}`, func(t *testing.T, c *Config) {
			if got := c.Names(); !reflect.DeepEqual(got, []string{"a"}) {
				t.Errorf("names = %v", got)
			}
		}},
		{"CNI network names", `{"pod_networks": [{"name": "MyNet", "image": "file:///a.aci"}, {"name": "net.v1", "image": "file:///a.aci"},
			{"name": "a_b-c", "image": "file:///a.aci"}, {"name": "0", "image": "file:///a.aci"}, {"name": "x.", "image": "file:///a.aci"},
			{"name": "` + strings.Repeat("N", 63) + `", "image": "file:///a.aci"}]}`, func(t *testing.T, c *Config) {
			if got, want := c.Names(), []string{"MyNet", "net.v1", "a_b-c", "0", "x.", strings.Repeat("N", 63)}; !reflect.DeepEqual(got, want) {
				t.Errorf("names = %v; want %v", got, want)
			}
		}},
		{"all settings", `{
			"plugin_timeout": "1m30s",
			"state_dir": "/srv/kurma/",
			"run_dir": "/run/k",
			"insecure_registries": ["localhost:5000", "10.0.0.5:5000", "registry.local", "[::1]:5000"],
			"trusted_keys": [{"prefix": "example.com/kurma", "key": "keys/kurma.asc"}, {"prefix": "", "key": "/abs/k.asc"}],
			"insecure_discovery": true,
			"verify": "if-signed",
			"signature_policy": "policy.json",
			"registries_d": "/etc/containers/registries.d",
			"max_image_size": 1048576,
			"fetch_timeout": "90s",
			"gc_interval": "0s",
			"check_interval": "1h",
			"status_interval": "5s",
			"runtime_check_interval": "0s",
			"metrics_listen": "127.0.0.1:9410",
			"redact_keys": ["password", "token"]
		}`, func(t *testing.T, c *Config) {
			want := &Config{
				PluginTimeout:      90 * time.Second,
				StateDir:           "/srv/kurma",
				RunDir:             "/run/k",
				InsecureRegistries: []string{"localhost:5000", "10.0.0.5:5000", "registry.local", "[::1]:5000"},
				TrustedKeys: []TrustedKey{
					{Prefix: "example.com/kurma", KeyFile: "/etc/kurma/keys/kurma.asc"},
					{Prefix: "", KeyFile: "/abs/k.asc"},
				},
				InsecureDiscovery: true,
				Verify:            "if-signed",
				SignaturePolicy:   "/etc/kurma/policy.json",
				RegistriesDir:     "/etc/containers/registries.d",
				MaxImageSize:      1 << 20,
				FetchTimeout:      90 * time.Second,
				CheckInterval:     time.Hour,
				StatusInterval:    5 * time.Second,
				MetricsListen:     "127.0.0.1:9410",
				RedactKeys:        []string{"password", "token"},
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got %+v; want %+v", c, want)
			}
		}},
		{"metrics on a unix socket", `{"metrics_listen": "/run/k//metrics.sock"}`, func(t *testing.T, c *Config) {
			if c.MetricsListen != "/run/k/metrics.sock" {
				t.Errorf("metrics_listen = %q", c.MetricsListen)
			}
		}},
		{"networks, defaults and image forms", `{"pod_networks": [
			{"name": "a", "image": "file:///abs/a.aci", "default": true},
			{"name": "b-2", "image": "file://images/b.aci"},
			{"name": "c_3", "image": "file://./c.aci", "default": false},
			{"name": "d", "image": "file://../d.aci", "default": true},
			{"name": "e", "image": "https://example.com/e.aci"},
			{"name": "f", "image": "http://127.0.0.1:8080/f.aci", "verify": "none"},
			{"name": "g", "image": "docker://localhost:5000/kurma/cni-netplugin:v1"},
			{"name": "h", "image": "docker://busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			{"name": "i", "image": "example.com/kurma/cni-netplugin:v1"},
			{"name": "j", "image": "example.com/kurma/cni-netplugin:v1.2.0,os=linux,arch=amd64"},
			{"name": "k", "image": "example.com/kurma/cni-netplugin"},
			{"name": "l", "image": "file://localhost/abs/l.aci"}
		]}`, func(t *testing.T, c *Config) {
			want := map[string]string{
				"a":   "file:///abs/a.aci",
				"b-2": "file:///etc/kurma/images/b.aci",
				"c_3": "file:///etc/kurma/c.aci",
				"d":   "file:///etc/d.aci",
				"e":   "https://example.com/e.aci",
				"f":   "http://127.0.0.1:8080/f.aci",
				"g":   "docker://localhost:5000/kurma/cni-netplugin:v1",
				"h":   "docker://busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				"i":   "example.com/kurma/cni-netplugin:v1",
				"j":   "example.com/kurma/cni-netplugin:v1.2.0,os=linux,arch=amd64",
				"k":   "example.com/kurma/cni-netplugin",
				"l":   "file:///abs/l.aci",
			}
			for _, n := range c.Networks {
				if n.ImageURI != want[n.Name] {
					t.Errorf("network %s: ACI = %q; want %q", n.Name, n.ImageURI, want[n.Name])
				}
			}
			if got := names(c.Defaults()); !reflect.DeepEqual(got, []string{"a", "d"}) {
				t.Errorf("Defaults() = %v", got)
			}
			if got := c.Names(); len(got) != 12 || got[0] != "a" || got[11] != "l" {
				t.Errorf("Names() = %v", got)
			}
			n, ok := c.Network("c_3")
			if !ok || n.Name != "c_3" || n.Default {
				t.Errorf("Network(c_3) = %+v, %v", n, ok)
			}
			if _, ok := c.Network("zz"); ok {
				t.Errorf("Network(zz) found")
			}
		}},
		{"plugin keys with kurma-like names are the plugin's", `{"pod_networks": [
			{"name": "a", "image": "file:///a", "Type": "x", "defaults": 1, "acis": [], "containerInterfaces": 2}]}`,
			func(t *testing.T, c *Config) {}},
		{"verify is inherited unless the network says", `{"verify": "if-signed", "trusted_keys": [{"prefix": "", "key": "k"}], "pod_networks": [
			{"name": "a", "image": "file:///a"},
			{"name": "b", "image": "docker://r.example.com/kurma/net:v1", "verify": "required", "image_name": "r.example.com/kurma/net"},
			{"name": "c", "image": "example.com/kurma/net:v1", "verify": "none", "image_name": "example.com/kurma/net"}]}`,
			func(t *testing.T, c *Config) {
				got := map[string][2]string{}
				for _, n := range c.Networks {
					got[n.Name] = [2]string{n.Verify, n.ImageName}
				}
				want := map[string][2]string{
					"a": {"if-signed", ""},
					"b": {"required", "r.example.com/kurma/net"},
					"c": {"none", "example.com/kurma/net"},
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("verify/image_name = %v; want %v", got, want)
				}
			}},
		{"no verify anywhere stays empty for the fetcher to decide", `{"pod_networks": [{"name": "a", "image": "file:///a"}]}`,
			func(t *testing.T, c *Config) {
				if c.Verify != "" || c.Networks[0].Verify != "" {
					t.Errorf("verify = %q / %q; want empty", c.Verify, c.Networks[0].Verify)
				}
			}},
		{"allow_capabilities", `{"pod_networks": [{"name": "a", "image": "file:///a", "allow_capabilities": ["CAP_SYS_MODULE", "CAP_BPF"]}, {"name": "b", "image": "file:///b"}]}`,
			func(t *testing.T, c *Config) {
				if got := c.Networks[0].AllowCapabilities; !reflect.DeepEqual(got, []string{"CAP_SYS_MODULE", "CAP_BPF"}) {
					t.Errorf("a: AllowCapabilities = %v", got)
				}
				if got := c.Networks[1].AllowCapabilities; got != nil {
					t.Errorf("b: AllowCapabilities = %v", got)
				}
			}},
		{"template", `{"pod_networks": [{"name": "a", "image": "file:///a", "containerInterface": "veth{{shortuuid}}{{num}}"}]}`,
			func(t *testing.T, c *Config) {
				if c.Networks[0].ContainerInterface != "veth{{shortuuid}}{{num}}" {
					t.Errorf("ContainerInterface = %q", c.Networks[0].ContainerInterface)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.json), "/etc/kurma")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func names(ns []*Network) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func TestLoadResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "etc", "kurma")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sub, "kurmad.json")
	data := `{
		"pod_networks": [
			{"name": "a", "image": "file://images/a.aci", "image_name": "example.com/a"},
			{"name": "b", "image": "file://./b.aci", "image_name": "example.com/b"},
			{"name": "c", "image": "file://../c.aci", "image_name": "example.com/c"},
			{"name": "d", "image": "file:///abs/d.aci", "image_name": "example.com/d"}
		],
		"trusted_keys": [{"prefix": "example.com", "key": "keys/k.asc"}],
		"signature_policy": "../containers/policy.json",
		"registries_d": "registries.d"
	}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// Load reads the trust files it names, and finds the relative images.
	for _, f := range []string{filepath.Join(sub, "keys/k.asc"), filepath.Join(dir, "etc/containers/policy.json"),
		filepath.Join(sub, "images/a.aci"), filepath.Join(sub, "b.aci"), filepath.Join(dir, "etc/c.aci")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(sub, "registries.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Load through a relative path too: the base is still the file's dir.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, rel} {
		c, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%s): %v", p, err)
		}
		if c.Path != path {
			t.Errorf("Path = %q; want %q", c.Path, path)
		}
		want := []string{
			"file://" + filepath.Join(sub, "images/a.aci"),
			"file://" + filepath.Join(sub, "b.aci"),
			"file://" + filepath.Join(dir, "etc", "c.aci"),
			"file:///abs/d.aci",
		}
		for i, n := range c.Networks {
			if n.ImageURI != want[i] {
				t.Errorf("%s: ACI = %q; want %q", n.Name, n.ImageURI, want[i])
			}
		}
		if got := c.TrustedKeys[0].KeyFile; got != filepath.Join(sub, "keys/k.asc") {
			t.Errorf("KeyFile = %q", got)
		}
		if got := c.SignaturePolicy; got != filepath.Join(dir, "etc", "containers", "policy.json") {
			t.Errorf("SignaturePolicy = %q", got)
		}
		if got := c.RegistriesDir; got != filepath.Join(sub, "registries.d") {
			t.Errorf("RegistriesDir = %q", got)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want ErrNotExist", err)
	}
	// examples/pod_networks.json copied to where an install keeps its
	// config: its relative image path names nothing there, which is said
	// at load, with the image the install copied as "did you mean".
	etc, state := filepath.Join(t.TempDir(), "etc", "kurma"), t.TempDir()
	example, err := os.ReadFile("../../examples/pod_networks.json")
	if err != nil {
		t.Fatal(err)
	}
	example = bytes.Replace(example, []byte(`{`), []byte(`{"state_dir": "`+state+`",`), 1)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{filepath.Join(etc, "kurmad.json"): example, filepath.Join(state, "cni-netplugin.aci"): nil} {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Load(filepath.Join(etc, "kurmad.json"))
	want := `"file://../images/out/cni-netplugin.aci" is relative to the config file's directory ` + etc + `, and ` +
		filepath.Join(filepath.Dir(etc), "images/out/cni-netplugin.aci") + ` does not exist; did you mean "file://` + filepath.Join(state, "cni-netplugin.aci") + `"?`
	if ps := problemsOf(t, err); len(ps) != 2 || ps[0].Path != "pod_networks[0].image" || ps[0].Msg != want || ps[1].Path != "pod_networks[1].image" {
		t.Errorf("Load(the example copied to %s) = %v\nwant both images: %s", etc, err, want)
	}
	path := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(path, []byte(`{"pod_networks": [{"name": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if p := problemsOf(t, err); len(p) != 1 || p[0].Path != "pod_networks[0].image" {
		t.Errorf("Load(bad) = %v", err)
	}
}

// TestExample loads examples/pod_networks.json: the Kurma spec's mynet,
// and webnet, a conflist that takes ports, addresses, MACs and bandwidth.
func TestExample(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Parsed as Load would, where it is, without asking for the image
	// (images/out is what make images writes).
	data, err := os.ReadFile(filepath.Join(root, "examples/pod_networks.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, filepath.Join(root, "examples"))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	n, ok := c.Network("mynet")
	if !ok || !n.Default || !slices.Equal(c.Names(), []string{"mynet", "webnet"}) {
		t.Fatalf("networks = %v", c.Names())
	}
	web, _ := c.Network("webnet")
	if caps := web.CNICapabilities(); web.Default || !slices.Equal(caps, []string{"bandwidth", "ips", "mac", "portMappings"}) {
		t.Errorf("webnet: default %v, capabilities %q", web.Default, caps)
	}
	if want := "file://" + filepath.Join(root, "images/out/cni-netplugin.aci"); n.ImageURI != want {
		t.Errorf("ACI = %q; want %q", n.ImageURI, want)
	}
	if c.PluginTimeout != time.Minute || c.StateDir != DefaultStateDir || c.RunDir != DefaultRunDir {
		t.Errorf("settings = %+v", c)
	}
	b, err := n.PluginConfig([]Arg{{"IP", "10.10.0.9"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := readmeStdinExample(t); string(b) != want {
		t.Errorf("docs/config.md's example of what mynet's plugin gets on stdin is not what it gets:\ndocs/config.md:\n%s\nPluginConfig:\n%s", want, b)
	}
	name, err := NewInterfaceNamer("0c6f3b7e-0000-4000-8000-000000000000").Name(n)
	if err != nil || name != "eth0" {
		t.Errorf("interface = %q, %v", name, err)
	}
}

// readmeStdinExample is the code block that follows docs/config.md's
// sentence on what mynet's plugin gets on stdin.
func readmeStdinExample(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "then gets exactly these bytes on stdin"
	_, after, ok := strings.Cut(string(readme), marker)
	if !ok {
		t.Fatalf("docs/config.md has no %q", marker)
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatal("docs/config.md: no ```json block after the stdin example's sentence")
	}
	block, _, ok = strings.Cut(block, "\n```")
	if !ok {
		t.Fatal("docs/config.md: the stdin example's block does not end")
	}
	return block
}

// TestImageFormerName: "aci", the former name of "image", still names a
// network's image, and goes to the plugin no more than "image" does.
func TestImageFormerName(t *testing.T) {
	cfg, err := Parse([]byte(`{"pod_networks": [{"name": "old", "aci": "file://x.aci", "type": "bridge"}, {"name": "new", "image": "file://x.aci", "type": "bridge"}]}`), "/etc/kurma")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cfg.Networks {
		if n.ImageURI != "file:///etc/kurma/x.aci" {
			t.Errorf("%s: ImageURI = %q", n.Name, n.ImageURI)
		}
		conf, err := n.PluginConfig(nil)
		if err != nil || strings.Contains(string(conf), `"aci"`) || strings.Contains(string(conf), `"image"`) {
			t.Errorf("%s: plugin config %s, %v", n.Name, conf, err)
		}
	}
}

// TestClusterKeys: cgroup_parent and a network's kubernetes_credentials
// are read, and the latter, kurma's key, is not in the plugin's config.
func TestClusterKeys(t *testing.T) {
	c, err := Parse([]byte(`{"cgroup_parent": "kurma/node1", "pod_networks": [
		{"name": "a", "image": "file:///a", "kubernetes_credentials": true, "type": "x"},
		{"name": "b", "image": "file:///b", "type": "x"}]}`), "/")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Network("a")
	b, _ := c.Network("b")
	if c.CgroupParent != "kurma/node1" || !a.KubernetesCredentials || b.KubernetesCredentials {
		t.Errorf("cgroup_parent %q, a %v, b %v", c.CgroupParent, a.KubernetesCredentials, b.KubernetesCredentials)
	}
	if conf, err := a.PluginConfig(nil); err != nil || strings.Contains(string(conf), "kubernetes_credentials") {
		t.Errorf("a's plugin config %s (%v): kubernetes_credentials is kurma's key", conf, err)
	}
	if d, err := Parse([]byte(`{}`), "/"); err != nil || d.CgroupParent != "" {
		t.Errorf("default cgroup_parent %q (%v), want \"\" (networkpod's default)", d.CgroupParent, err)
	}
}

// TestParseUTF8BOM: a config saved with a UTF-8 byte order mark (as some
// editors write it) parses as without one.
func TestParseUTF8BOM(t *testing.T) {
	cfg, err := Parse([]byte("\xef\xbb\xbf"+`{"pod_networks": [{"name": "a", "image": "file:///x.aci"}]}`), "/")
	if err != nil || len(cfg.Networks) != 1 || cfg.Networks[0].Name != "a" {
		t.Fatalf("Parse with a UTF-8 BOM: %+v, %v", cfg, err)
	}
}

// TestLoadMissingTrustFiles: a trusted key, signature policy or
// registries.d that is not there is one more problem of the config,
// reported with the others (kurmad exits 2 listing them all), not a
// failure of the boot after the config passed.
func TestLoadMissingTrustFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kurmad.json")
	conf := `{"trusted_keys": [{"prefix": "", "key": "keys/missing.asc"}], "signature_policy": "policy.json",
		"registries_d": "registries.d", "plugin_timeout": "soon", "pod_networks": [{"name": "a", "image": "file:///x.aci"}]}`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Load = %v, want a *ValidationError", err)
	}
	want := map[string]string{"plugin_timeout": "not a duration", "trusted_keys[0].key": filepath.Join(dir, "keys/missing.asc"),
		"signature_policy": filepath.Join(dir, "policy.json"), "registries_d": filepath.Join(dir, "registries.d")}
	for _, p := range ve.Problems {
		if w, ok := want[p.Path]; ok && strings.Contains(p.Msg, w) {
			delete(want, p.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("problems %v lack %v", ve.Problems, want)
	}
	if _, err := Parse([]byte(conf), dir); err == nil || strings.Contains(err.Error(), "missing.asc") {
		t.Errorf("Parse = %v: it reads no file, so only plugin_timeout is a problem", err)
	}
}
