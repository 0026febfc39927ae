package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// Module is kurma's module path: module-relative paths in the document
// ("pkg/podnet") are under it.
const Module = "github.com/kurma-project/kurma"

// Rule is one row of the document's "Import rules" table: Package (a
// pattern, see Match) must not import, directly or not, any package that
// Forbidden's patterns match. WithTests checks its test binary too.
type Rule struct {
	Package   string
	WithTests bool
	Forbidden []string
	Line      int // in the document
}

// ParseRules reads the "Import rules" table of the document.
func ParseRules(doc []byte) ([]Rule, error) {
	var rules []Rule
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Import rules"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			return nil, fmt.Errorf("line %d: a row needs a package and what it must not import: %q", n, line)
		}
		subject := codes(cells[0])
		if len(subject) == 0 {
			continue // the header and its separator
		}
		if len(subject) != 1 {
			return nil, fmt.Errorf("line %d: one package per row, got %q", n, subject)
		}
		forbidden := codes(cells[1])
		if len(forbidden) == 0 {
			return nil, fmt.Errorf("line %d: %s must not import nothing?", n, subject[0])
		}
		rules = append(rules, Rule{Package: subject[0], WithTests: strings.Contains(cells[0], "and its tests"),
			Forbidden: forbidden, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("no \"## Import rules\" table found")
	}
	return rules, nil
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codes returns the `code spans` of a table cell.
func codes(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// Match reports whether import path p matches a pattern of the document:
// "kurma" (any package of the module), "x/..." (x and everything under it)
// or an exact path; a pattern whose first element has no dot is relative
// to the module.
func Match(pattern, p string) bool {
	if pattern == "kurma" {
		return p == Module || strings.HasPrefix(p, Module+"/")
	}
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		full = Module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(full, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == full
}

// Graph is an import graph: each package's direct imports.
type Graph map[string][]string

// Violation is a package that imports what a rule forbids, through Chain
// (the package first, the forbidden one last).
type Violation struct {
	Rule      Rule
	Package   string
	Forbidden string // the pattern it broke
	Chain     []string
}

func (v Violation) String() string {
	short := make([]string, len(v.Chain))
	for i, p := range v.Chain {
		if base, _, ok := strings.Cut(p, " ["); ok {
			p = base + " (test build)" // go list's name of a package built for a test binary
		}
		short[i] = strings.TrimPrefix(p, Module+"/")
	}
	return fmt.Sprintf("%s must not import %s (docs/architecture.md line %d), but imports %s: %s",
		short[0], v.Forbidden, v.Rule.Line, short[len(short)-1], strings.Join(short, " → "))
}

// Check returns the violations of rule by root, a package of g: for each
// package root reaches that a forbidden pattern matches (and reaches not
// only through another such package), the shortest chain to it.
func Check(g Graph, rule Rule, root string) []Violation {
	prev := map[string]string{root: ""}
	queue := []string{root}
	var out []Violation
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if v, ok := violation(rule, root, p, prev); ok {
			out = append(out, v)
			continue // what it imports in turn is its own matter
		}
		for _, imp := range g[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return out
}

// violation is the violation of rule when root reaches p (through prev)
// and p is forbidden; a package is never its own violation (nor its test
// binary's).
func violation(rule Rule, root, p string, prev map[string]string) (Violation, bool) {
	if p == root || p == strings.TrimSuffix(root, ".test") {
		return Violation{}, false
	}
	for _, f := range rule.Forbidden {
		if Match(f, p) {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			return Violation{Rule: rule, Package: root, Forbidden: f, Chain: chain}, true
		}
	}
	return Violation{}, false
}

// listed is what go list -json says of a package.
type listed struct {
	ImportPath string
	Imports    []string
	ForTest    string
}

// Load returns the import graph go list -deps gives for the patterns
// (with test binaries when tests), run in dir with the build tags, and the
// packages the patterns name themselves.
func Load(dir, tags string, tests bool, patterns ...string) (Graph, []string, error) {
	args := []string{"list", "-e", "-deps", "-json=ImportPath,Imports,ForTest,DepOnly", "-tags", tags}
	if tests {
		args = append(args, "-test")
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	g := Graph{}
	var named []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			listed
			DepOnly bool
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, err
		}
		g[p.ImportPath] = p.Imports
		if !p.DepOnly {
			named = append(named, p.ImportPath)
		}
	}
	return g, named, nil
}
