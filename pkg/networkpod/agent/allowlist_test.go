package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// allowlistTables are the allowlists as docs/security.md shows them: one
// row per kind of ioctl requests, one per netlink family.
func allowlistTables() (ioctls, netlink string) {
	var b strings.Builder
	for _, g := range AllowedIoctls() {
		var names []string
		for _, c := range g.Ioctl {
			names = append(names, "`"+c.Name+"`")
		}
		b.WriteString("| " + g.Name + " | " + strings.Join(names, ", ") + " |\n")
	}
	ioctls = b.String()
	b.Reset()
	for _, f := range AllowedNetlink() {
		b.WriteString("| `" + f.Name + "` | " + f.Use + " |\n")
	}
	return ioctls, b.String()
}

// docs/security.md lists exactly the filter's allowlists, in its tables
// under "Seccomp".
func TestSecurityDocListsAllowlists(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "docs/security.md"))
	if err != nil {
		t.Fatal(err)
	}
	ioctls, netlink := allowlistTables()
	for _, tbl := range []struct{ head, want string }{
		{"| ioctl requests | |\n|---|---|\n", ioctls},
		{"| netlink family | for |\n|---|---|\n", netlink},
	} {
		if !strings.Contains(string(doc), tbl.head+tbl.want+"\n") {
			t.Errorf("docs/security.md's table after\n%swants to be\n%s", tbl.head, tbl.want)
		}
	}
}

// TestAllowlistsFixed: what AllowedIoctls and AllowedNetlink return is a
// copy; changing it changes nothing of the filter's.
func TestAllowlistsFixed(t *testing.T) {
	groups, families := AllowedIoctls(), AllowedNetlink()
	groups[0].Ioctl[0].Cmd, groups[0].Name = 0, "changed"
	families[0].Protocol = 99
	if g, f := AllowedIoctls()[0], AllowedNetlink()[0]; g.Ioctl[0].Cmd == 0 || g.Name == "changed" || f.Protocol == 99 {
		t.Errorf("a caller changed the filter's allowlists: %+v, %+v", g.Ioctl[0], f)
	}
}
