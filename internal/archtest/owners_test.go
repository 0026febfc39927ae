package archtest

import (
	"strings"
	"testing"
)

// TestCheckOwner: each way a row can be wrong is reported, naming the
// line and what is wrong; a right row gives nothing.
func TestCheckOwner(t *testing.T) {
	owners, err := ParseOwners([]byte("## Who owns what\n\n| concept | owner | asked | types | library |\n|---|---|---|---|---|\n" +
		"| pod (`Pod`) | `pkg/podnet` | `podnet.Manager`, `Manager.Create` | `state.Pod` | `go.etcd.io/bbolt` |\n"))
	if err != nil || len(owners) != 1 {
		t.Fatalf("ParseOwners = %+v, %v", owners, err)
	}
	o := owners[0]
	names := map[string]string{Module + "/pkg/podnet": "podnet", Module + "/pkg/state": "state", Module + "/pkg/api": "api"}
	decls := Decls{
		Module + "/pkg/podnet": {"type Manager": true, "Manager": true, "Manager.Create": true},
		Module + "/pkg/state":  {"type Pod": true, "Pod": true},
		Module + "/pkg/api":    {"type Pod": true, "Pod": true},
	}
	imports := map[string][]string{Module + "/pkg/podnet": {"go.etcd.io/bbolt"}, Module + "/pkg/api": {"go.etcd.io/bbolt/errors"}}
	got := strings.Join(CheckOwner(o, decls, names, imports), "\n")
	for _, want := range []string{"line 5 (pod): api.Pod is a type of the concept", "pkg/api imports go.etcd.io/bbolt/errors"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
	o.Types = append(o.Types, "api.Pod")
	o.Also = []string{"pkg/api"}
	if errs := CheckOwner(o, decls, names, imports); len(errs) != 0 {
		t.Errorf("a right row: %v", errs)
	}
	o.Asked = append(o.Asked, "Manager.Gone")
	o.Types = append(o.Types, "api.Gone")
	got = strings.Join(CheckOwner(o, decls, names, imports), "\n")
	for _, want := range []string{"pkg/podnet does not declare Manager.Gone", "no type api.Gone"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
}
