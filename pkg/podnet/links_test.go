package podnet

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// linksConfig: prep's add leaves links kurma did not name (eth0 and
// gabcd) beside its own interface; the others meet them.
const linksConfig = `{"pod_networks": [
	{"name": "prep", "image": "file:///x.aci", "containerInterface": "prep0", "type": "fake"},
	{"name": "plain", "image": "file:///x.aci", "type": "fake"},
	{"name": "rnd", "image": "file:///x.aci", "containerInterface": "g{{random 4}}", "type": "fake"},
	{"name": "fixed", "image": "file:///x.aci", "containerInterface": "eth0", "type": "fake"},
	{"name": "loop", "image": "file:///x.aci", "containerInterface": "lo", "type": "fake"}
]}`

// TestCreateNamesAroundLinks: before each add kurmad reads the links of the
// pod's netns (a real one) and treats them as taken: a network without
// template gets the first free ethN, passed to its add; a random template
// renders a free name; a fixed name that is a link fails naming it, lo
// included, and the pod is rolled back.
func TestCreateNamesAroundLinks(t *testing.T) {
	fe := newFakeExec()
	f := newFixture(t, fe)
	f.m = f.newManager(t, fe, parseConfig(t, linksConfig))
	fe.on("add prep", func(c call, _ context.Context) ([]byte, error) {
		testutil.AddLinksIn(t, c.Args[0], "prep0", "eth0", "gabcd")
		return okResult(c, ""), nil
	})
	ctx := context.Background()

	p, err := f.m.Create(ctx, CreateRequest{Networks: []string{"prep", "plain", "rnd"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fe.callsFor("add plain")[0].Args; len(got) != 3 || got[2] != "eth1" {
		t.Errorf("add plain args = %v; want eth1, the first ethN free in the netns", got)
	}
	rnd := p.Attachments[2].Interface
	if !regexp.MustCompile(`^g[a-z0-9]{4}$`).MatchString(rnd) || rnd == "gabcd" {
		t.Errorf("rnd's interface %q: want g + 4 random characters, not a link of the netns", rnd)
	}
	if got := []string{p.Attachments[0].Interface, p.Attachments[1].Interface}; !slices.Equal(got, []string{"prep0", "eth1"}) {
		t.Errorf("interfaces = %v", got)
	}
	if err := f.m.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		networks []string
		failing  string
		link     string
	}{
		{[]string{"prep", "fixed"}, "fixed", "eth0"},
		{[]string{"loop"}, "loop", "lo"},
	} {
		fe.calls = nil
		_, err := f.m.Create(ctx, CreateRequest{Networks: tt.networks})
		var ne *netplugin.NetworkError
		want := `interface "` + tt.link + `" is taken: the pod's network namespace already has a link "` + tt.link + `"`
		if !errors.Is(err, netconfig.ErrInterfaceConflict) || !errors.As(err, &ne) || ne.Network != tt.failing || !strings.Contains(err.Error(), want) {
			t.Errorf("Create(%v) = %v; want a conflict of network %s saying %s", tt.networks, err, tt.failing, want)
		}
		if n := len(fe.callsFor("add " + tt.failing)); n != 0 {
			t.Errorf("add %s ran %d times with a taken name", tt.failing, n)
		}
	}
	if ids := f.onlyPodIDs(t); len(ids) != 0 {
		t.Errorf("journal holds %v", ids)
	}
	if e, _ := os.ReadDir(f.netns); len(e) != 0 {
		t.Errorf("netns dir holds %d entries after the rollbacks", len(e))
	}
}
