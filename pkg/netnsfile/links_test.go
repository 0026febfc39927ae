package netnsfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// podNetnsWith makes a netns at name in a temp dir holding lo and a link
// of each of links, removed at the end of the test.
func podNetnsWith(t testing.TB, name string, links ...string) string {
	t.Helper()
	p := testutil.NewNetnsFile(t, filepath.Join(t.TempDir(), name))
	testutil.AddLinksIn(t, p, links...)
	return p
}

// TestLinks: every link of the namespace, lo included, and nothing of the
// host's; a missing path is os.ErrNotExist.
func TestLinks(t *testing.T) {
	testutil.RequireRoot(t)
	p := podNetnsWith(t, "ktl-links", "eth1", "g0abc")
	got, err := netnsfile.Links(p)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"eth1", "g0abc", "lo"}; !slices.Equal(got, want) {
		t.Errorf("Links = %v; want %v", got, want)
	}
	if _, err := netnsfile.Links(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Links of a missing path: %v; want os.ErrNotExist", err)
	}
}

// TestPodLinks: every link of a pod's namespace with its kind (lo too),
// and the refusals of Open: a symlink to a namespace is not followed.
func TestPodLinks(t *testing.T) {
	testutil.RequireRoot(t)
	p := podNetnsWith(t, "ktl-podlinks", "eth1")
	got, err := netnsfile.PodLinks(p)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b netnsfile.Link) int { return strings.Compare(a.Name, b.Name) })
	if want := []netnsfile.Link{{Name: "eth1", Kind: "bridge"}, {Name: "lo", Kind: "device"}}; !slices.Equal(got, want) {
		t.Errorf("PodLinks = %v; want %v", got, want)
	}
	link := filepath.Join(t.TempDir(), "planted")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := netnsfile.PodLinks(link); !errors.Is(err, netnsfile.ErrNotPodNetns) {
		t.Errorf("PodLinks of a symlink: %v; want ErrNotPodNetns", err)
	}
}

// BenchmarkLinks is what reading a pod's links costs an attach: one per
// add, in a namespace holding lo and a couple of interfaces.
func BenchmarkLinks(b *testing.B) {
	testutil.RequireRoot(b)
	p := podNetnsWith(b, "ktl-bench", "eth0", "eth1")
	for b.Loop() {
		if _, err := netnsfile.Links(p); err != nil {
			b.Fatal(err)
		}
	}
}
