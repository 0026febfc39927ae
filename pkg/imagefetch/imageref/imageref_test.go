package imageref

import (
	"os"
	"strings"
	"testing"
)

// TestResolve: each scheme's references are checked and local ones
// resolved against the config's directory; what is wrong is named, with
// how to write it.
func TestResolve(t *testing.T) {
	for _, c := range []struct{ in, want, msg string }{
		{"file:///srv/x.aci", "file:///srv/x.aci", ""},
		{"file://images/x.aci", "file:///etc/kurma/images/x.aci", ""},
		{"file://localhost/srv/x.aci", "file:///srv/x.aci", ""},
		{"file://../x.aci", "file:///etc/x.aci", ""},
		{"file://", "", "does not name a file"},
		{"file:///x.aci#frag", "", "does not name a file"},
		{"https://images.example.com/x.aci", "https://images.example.com/x.aci", ""},
		{"http:///x.aci", "", "needs a host"},
		{"docker://localhost:5000/kurma/net:v1", "docker://localhost:5000/kurma/net:v1", ""},
		{"docker://Kurma/Net", "", "not a valid docker image reference"},
		{"example.com/kurma/net:v1,os=linux", "example.com/kurma/net:v1,os=linux", ""},
		{"Example.com/net", "", "not an appc image name"},
		{"oci-archive:///srv/net.tar", "oci-archive:///srv/net.tar", ""},
		{"oci-archive://net.tar#kurma.dev/cni-netplugin:v1", "oci-archive:///etc/kurma/net.tar#kurma.dev/cni-netplugin:v1", ""},
		{"oci-archive:///srv/net.tar#", "", "is not an image's ref name"},
		{"oci-archive:///srv/net.tar#a b", "", "contains whitespace"},
		{"oci-archive:///srv/net.tar#-x", "", "is not an image's ref name"},
		{"oci-archive://", "", "does not name an archive"},
		{"oci-archive:/srv/net.tar", "", `missing the "//" after the scheme`},
		{"ftp://example.com/x.aci", "", `unsupported scheme "ftp"`},
		{"docker:localhost/x", "", `missing the "//" after the scheme`},
		{"", "", "must not be empty"},
		{"file:///a b.aci", "", "contains whitespace"},
	} {
		got, msg := Resolve(c.in, "/etc/kurma")
		if got != c.want || !strings.Contains(msg, c.msg) || (c.msg == "") != (msg == "") {
			t.Errorf("Resolve(%q) = %q, %q; want %q, %q", c.in, got, msg, c.want, c.msg)
		}
	}
	if _, msg := Resolve("ftp://x", "/"); !strings.Contains(msg, Hint()) {
		t.Errorf("message %q lacks the hint", msg)
	}
}

// TestSchemesDocumented: docs/images.md's table of URI forms has a row for
// every scheme.
func TestSchemesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/images.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "| `") {
			rows = append(rows, strings.SplitN(l, "|", 3)[1])
		}
	}
	for _, s := range Schemes() {
		found := false
		for _, r := range rows {
			found = found || strings.Contains(r, "`"+s.Name+"://`")
		}
		if !found {
			t.Errorf("docs/images.md has no row for %s://", s.Name)
		}
	}
}

// TestSchemesIsACopy: what Schemes returns is the caller's; the one list
// the config check and the fetcher read stays as it was.
func TestSchemesIsACopy(t *testing.T) {
	got := Schemes()
	names := SchemeNames()
	if len(got) != len(names) || len(got) == 0 {
		t.Fatalf("%d schemes, %d names", len(got), len(names))
	}
	for i := range got {
		if got[i].Name != names[i] {
			t.Errorf("scheme %d: %s, name %s", i, got[i].Name, names[i])
		}
		got[i].Name = "changed"
	}
	names[0] = "changed"
	if _, ok := Lookup(SchemeNames()[0]); !ok || Schemes()[0].Name == "changed" || SchemeNames()[0] == "changed" {
		t.Fatal("changing the returned slices changed the list")
	}
}
