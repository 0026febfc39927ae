package gendef

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Definitions as the release before gendef hashed them (networks'
// hashDefinition, computed by that code for these entries): an upgrade
// must find every journaled generation's hash again, or it would restart
// every plugin container.
const (
	// {"name": "full", "image": "docker://example.com/kurma/cni:v1", "verify": "if-signed",
	// "image_name": "example.com/kurma/cni", "allow_capabilities": ["CAP_SYS_MODULE", "CAP_BPF"],
	// "allow_syscalls": ["keyctl", "bpf"], "kubernetes_credentials": true, "main_sees_pods": true,
	// "limits": {...every limit...}, ...}
	fullHash        = "d409babc441c3ee6352cfeb44d8c8fb30b2936be644c56658fe0372d1452927b"
	fullWrittenHash = "3a80b84f6b7fe1b29c9016a20f6c112992a37867e1d0cfbd700b1e1e8e5d358a"
	// {"name": "netpol", "image": "file:///n.aci", "role": "policy", "cluster_network": "full"}
	policyHash        = "157926cdb3b946eab4b4a4a452bcbbf296c59e1cd7679e6a25641c34b8b8e75e"
	policyWrittenHash = "f4195a55cbb5ff877071101ac66cb15a5f6c4606304bd91dc1788af3a5f201e3"
	// TestDefinitionKept's entry (pkg/networks): an image and one capability.
	plainHash = "f60d9a4ec3c658377a4acd8f285299594f8d3424032d471cb646c41fa2f10ef5"
)

// fullDefinition is the "full" entry's definition as netconfig parses it.
func fullDefinition() Definition {
	return Definition{
		Source:            Source{ImageURI: "docker://example.com/kurma/cni:v1", Verify: "if-signed", ImageName: "example.com/kurma/cni"},
		Config:            []byte(`{"name":"full","cniVersion":"1.0.0","type":"bridge","ipam":{"subnet": "10.1.0.0/16", "type": "host-local"}}`),
		AllowCapabilities: []string{"CAP_SYS_MODULE", "CAP_BPF"}, AllowSyscalls: []string{"keyctl", "bpf"},
		Limits: Limits{Pids: 2048, Memory: 512 << 20, CallPids: NoLimit, CallMemory: 64 << 20, Tmpfs: 16 << 20,
			WritableLayer: 32 << 20, StateDir: 128 << 20},
		MainSeesPods: true, KubernetesCredentials: true,
	}
}

// TestHashKept: the hash of a definition is the one the release before
// gendef journaled for it, by its meaning and as written.
func TestHashKept(t *testing.T) {
	policy := Definition{Source: Source{ImageURI: "file:///n.aci"}, Policy: true,
		Config: []byte(`{"name":"netpol","cluster_network":"full","policy_networks":["full"]}`)}
	plain := Definition{Source: Source{ImageURI: "file:///x.aci"}, AllowCapabilities: []string{"CAP_BPF"},
		Config: []byte(`{"name":"n","type":"loopback"}`)}
	full := fullDefinition()
	for _, tt := range []struct {
		name          string
		d             Definition
		hash, written string
	}{
		{"full", full, fullHash, fullWrittenHash},
		{"policy", policy, policyHash, policyWrittenHash},
		{"plain", plain, plainHash, plainHash},
	} {
		if got, err := tt.d.Hash(); err != nil || got != tt.hash {
			t.Errorf("%s: hash %s, %v; the previous release's %s", tt.name, got, err, tt.hash)
		}
		if got := tt.d.WrittenHash(); got != tt.written {
			t.Errorf("%s: hash as written %s; the previous release's %s", tt.name, got, tt.written)
		}
	}
	// The image fetched is not the definition: where it comes from is.
	full.Image = &Image{ID: "sha256-0123abcd", Rootfs: "/x"}
	if got, _ := full.Hash(); got != fullHash {
		t.Error("the image fetched changes the hash")
	}
}

// TestEveryFieldHashed: each field of a definition (each of its Source's
// and Limits' too) changes its hash, but the image fetched: a field added
// to Definition and forgotten in the hash fails here.
func TestEveryFieldHashed(t *testing.T) {
	base := Definition{Config: []byte(`{}`)}
	want, err := base.Hash()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range leafFields(reflect.TypeFor[Definition](), nil) {
		if name := fieldName(path); name == "Image" {
			continue
		}
		d := base
		setNonZero(reflect.ValueOf(&d).Elem().FieldByIndex(path))
		if got, err := d.Hash(); err != nil || got == want {
			t.Errorf("%s set: hash %s, %v; want another than an unset one's", fieldName(path), got, err)
		}
	}
}

// journaledKeys are the generation record's keys a definition writes:
// they never change across releases (pkg/state).
var journaledKeys = []string{"image", "config", "allow_capabilities", "allow_syscalls", "limits", "main_sees_pods", "kubernetes_credentials"}

// TestJournaled: every field is journaled under a key of its own, or is
// the config entry's alone (json:"-": Source, Policy), and reads back as
// it was written; the image as its ID.
func TestJournaled(t *testing.T) {
	var keys []string
	for f := range reflect.TypeFor[Definition]().Fields() {
		tag := f.Tag.Get("json")
		if tag == "" {
			t.Errorf("%s has no json key: the journal's keys never change, name it", f.Name)
		}
		if name := strings.Split(tag, ",")[0]; name != "-" {
			keys = append(keys, name)
		}
	}
	if !slices.Equal(keys, journaledKeys) {
		t.Errorf("journaled keys %q, want %q (a record's keys never change; add new ones to the list)", keys, journaledKeys)
	}
	var d Definition
	for f := range reflect.TypeFor[Definition]().Fields() {
		setNonZero(reflect.ValueOf(&d).Elem().FieldByIndex(f.Index))
	}
	d.Image = &Image{ID: "sha256-1", Rootfs: "/rootfs", App: App{Exec: []string{"/main"}}}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var got Definition
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := d
	want.Source, want.Policy, want.Image = Source{}, false, &Image{ID: "sha256-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("journaled as %s, read back as %+v; want %+v", b, got, want)
	}
}

// leafFields are the index paths of t's fields, into its struct fields
// (Source, Limits) but the image's.
func leafFields(t reflect.Type, prefix []int) [][]int {
	var out [][]int
	for f := range t.Fields() {
		path := append(slices.Clone(prefix), f.Index...)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, leafFields(f.Type, path)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

func fieldName(path []int) string {
	t := reflect.TypeFor[Definition]()
	var names []string
	for _, i := range path {
		f := t.Field(i)
		names, t = append(names, f.Name), f.Type
	}
	return strings.Join(names, ".")
}

// setNonZero sets v to a value that is not its zero (a config stays JSON).
func setNonZero(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int64:
		v.SetInt(7)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(`{"x":1}`))
			return
		}
		v.Set(reflect.ValueOf([]string{"x"}))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		setNonZero(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			setNonZero(v.Field(i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	default:
		panic("setNonZero: no value for " + v.Type().String())
	}
}
