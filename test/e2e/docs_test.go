package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/kurma-project/kurma/internal/testutil"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// The documentation's tests: README.md and docs/*.md show kurmad configs
// and CNI conflists that load, README indexes every document, and every
// relative link of every Markdown file resolves (blocks and links as
// testutil's markdown.go reads them). They need no root and touch
// nothing.

// documents are the Markdown files whose blocks the tests run: README.md
// and docs/.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(testutil.RepoRoot(), "README.md")}, docs...)
}

// blocksOf returns the blocks of kind kind in the documents, failing t
// when there is none: a test that checks nothing must not pass.
func blocksOf(t *testing.T, kind string) []testutil.Block {
	t.Helper()
	var out []testutil.Block
	for _, d := range documents(t) {
		bs, err := testutil.Blocks(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Kind == kind {
				b.File, _ = filepath.Rel(testutil.RepoRoot(), b.File)
				out = append(out, b)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no block marked %q in README.md or docs/", kind)
	}
	return out
}

// checkCopy checks that a block marked as the copy of a repository file
// is that file's content.
func checkCopy(t *testing.T, b testutil.Block) {
	t.Helper()
	if b.Of == "" {
		return
	}
	want, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), b.Of))
	if err != nil {
		t.Errorf("%s copies %s: %v", b, b.Of, err)
		return
	}
	if b.Text != string(want) {
		t.Errorf("%s is not %s as it is: copy the file into the document again", b, b.Of)
	}
}

// TestConfigExamples: every kurmad config the documents show loads with
// kurmad's own parser, with every problem it has reported.
func TestConfigExamples(t *testing.T) {
	for _, b := range blocksOf(t, "kurmad-config") {
		checkCopy(t, b)
		base := filepath.Dir(filepath.Join(testutil.RepoRoot(), b.File))
		if b.Of != "" {
			base = filepath.Dir(filepath.Join(testutil.RepoRoot(), b.Of))
		}
		cfg, err := netconfig.Parse([]byte(b.Text), base)
		if err != nil {
			t.Errorf("%s does not load:\n%v", b, err)
			continue
		}
		if len(cfg.Networks) == 0 {
			t.Errorf("%s has no network", b)
		}
	}
}

// TestConflistExamples: every CNI conflist the documents show is one
// libcni reads, with every plugin typed.
func TestConflistExamples(t *testing.T) {
	for _, b := range blocksOf(t, "conflist") {
		checkCopy(t, b)
		list, err := libcni.ConfListFromBytes([]byte(b.Text))
		if err != nil {
			t.Errorf("%s: libcni: %v", b, err)
			continue
		}
		if list.Name == "" || len(list.Plugins) == 0 {
			t.Errorf("%s: conflist without a name or plugins: %+v", b, list)
		}
	}
}

// TestPodmanSnippet: README has the podman snippet test/e2e runs
// (TestReadmePodmanSnippet), once.
func TestPodmanSnippet(t *testing.T) {
	var in []testutil.Block
	for _, b := range blocksOf(t, "podman-snippet") {
		if b.File != "README.md" {
			t.Errorf("%s: the podman snippet is README's", b)
		}
		in = append(in, b)
	}
	if len(in) != 1 {
		t.Errorf("README has %d podman snippets, want 1", len(in))
	}
}

// TestLinks: every relative link of every Markdown file in the
// repository names a file or directory that exists and, with an anchor,
// a heading of that Markdown file.
func TestLinks(t *testing.T) {
	files, err := testutil.MarkdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") {
		t.Fatalf("Markdown files %v lack README.md", files)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) map[string]bool {
		if a, ok := anchors[p]; ok {
			return a
		}
		a, err := testutil.Anchors(p)
		if err != nil {
			t.Fatal(err)
		}
		anchors[p] = a
		return a
	}
	n := 0
	for _, f := range files {
		links, err := testutil.Links(filepath.Join(testutil.RepoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			n++
			l.File = f
			target := filepath.Join(testutil.RepoRoot(), f)
			if l.Target != "" {
				target = filepath.Join(testutil.RepoRoot(), filepath.Dir(f), l.Target)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: %v", l, err)
				continue
			}
			if l.Anchor != "" && strings.HasSuffix(target, ".md") && !anchorsOf(target)[l.Anchor] {
				t.Errorf("%s: %s has no heading whose anchor is #%s", l, filepath.Base(target), l.Anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("no relative link found in any Markdown file")
	}
}

// TestReadme: README is at most 200 lines and indexes every document
// of docs/ and the manifests' and images' notes.
func TestReadme(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 200 {
		t.Errorf("README.md has %d lines, want at most 200: move the reference to docs/", n)
	}
	want := []string{"deploy/kubernetes/README.md", "images/README.md"}
	docs, err := filepath.Glob(filepath.Join(testutil.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		want = append(want, "docs/"+filepath.Base(d))
	}
	for _, w := range want {
		if !strings.Contains(readme, "]("+w+")") {
			t.Errorf("README.md's index does not link %s", w)
		}
	}
}
