package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The build tags of a release build and of make test: an import may hide
// behind either.
var tagSets = []string{"containers_image_openpgp", "containers_image_openpgp,kurma_failpoints"}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func readDoc(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestImportRules: every row of docs/architecture.md's "Import rules"
// holds for the code, under each build tag set; a rule names real
// packages (a misspelt pattern would make it vacuous).
func TestImportRules(t *testing.T) {
	rules, err := ParseRules(readDoc(t))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	root := repoRoot(t)
	for _, tags := range tagSets {
		g, pkgs, err := Load(root, tags, false, "./...")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			subjects := matching(r.Package, pkgs)
			if len(subjects) == 0 {
				t.Errorf("docs/architecture.md line %d: %q names no package of the module", r.Line, r.Package)
			}
			for _, f := range r.Forbidden {
				if len(matching(f, keys(g))) == 0 {
					t.Errorf("docs/architecture.md line %d: %q names no package the module builds with", r.Line, f)
				}
			}
			for _, s := range subjects {
				for _, v := range Check(g, r, s) {
					t.Errorf("tags %s: %s", tags, v)
				}
			}
			if !r.WithTests {
				continue
			}
			for _, s := range subjects {
				tg, _, err := Load(root, tags, true, s)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := tg[s+".test"]; !ok {
					t.Errorf("docs/architecture.md line %d: %s has no tests to check", r.Line, s)
				}
				for _, v := range Check(tg, r, s+".test") {
					t.Errorf("tags %s, tests: %s", tags, v)
				}
			}
		}
	}
}

// TestEveryPackageDocumented: the "Packages" section of
// docs/architecture.md lists every package of the module (as **path**),
// and lists none that is gone.
func TestEveryPackageDocumented(t *testing.T) {
	doc := string(readDoc(t))
	start := strings.Index(doc, "\n## Packages\n")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## Packages" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`\*\*([a-z0-9][a-z0-9_./-]*)\*\*`).FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	_, pkgs, err := Load(repoRoot(t), tagSets[1], false, "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, Module+"/")
		if !listed[rel] {
			t.Errorf("docs/architecture.md does not list package %s under \"Packages\": add it with what it owns", rel)
		}
		delete(listed, rel)
	}
	delete(listed, "test/k8s")        // its own module
	delete(listed, "plugins/flannel") // its own module
	delete(listed, "plugins/netpol")  // its own module
	for p := range listed {
		t.Errorf("docs/architecture.md lists %s under \"Packages\", which is no package of the module", p)
	}
}

func matching(pattern string, pkgs []string) []string {
	var out []string
	for _, p := range pkgs {
		if Match(pattern, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func keys(g Graph) []string {
	out := make([]string, 0, len(g))
	for k := range g {
		out = append(out, k)
	}
	return out
}

// TestOwners: every row of docs/architecture.md's "Who owns what" holds
// for the code: its owner is a package that declares what the others ask
// it through, its types exist, no other exported type is named as the
// concept, and no other package imports the owner's library directly.
func TestOwners(t *testing.T) {
	owners, err := ParseOwners(readDoc(t))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	root := repoRoot(t)
	for _, tags := range tagSets {
		decls, names, err := LoadDecls(root, tags)
		if err != nil {
			t.Fatal(err)
		}
		imports, err := DirectImports(root, tags)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range owners {
			for _, e := range CheckOwner(o, decls, names, imports) {
				t.Errorf("tags %s: %s", tags, e)
			}
		}
	}
}
