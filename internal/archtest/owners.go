package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
)

// Owner is one row of the document's "Who owns what" table: a concept,
// the package that owns it, the names others ask it through, the types
// of the concept (one per layer), and the library only the owner (and the
// packages the row names) imports.
type Owner struct {
	Concept string
	// Word is the type name of the concept ("Pod"): every exported type
	// of the module so named must be among Types. "" checks nothing.
	Word    string
	Package string   // "pkg/podnet"
	Asked   []string // "podnet.Manager", "Manager.Create": declared by Package
	Types   []string // "state.Pod": pkgname.Type, declared somewhere in the module
	// Library is a third-party import path prefix only Package and Also
	// import directly (tests included); "" for none.
	Library string
	Also    []string // patterns (see Match)
	Line    int
}

// ParseOwners reads the "Who owns what" table: | concept (`Word`) | `pkg`
// | asked through | types | library (also `pkg`, ...) |.
func ParseOwners(doc []byte) ([]Owner, error) {
	var out []Owner
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Who owns what"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			return nil, fmt.Errorf("line %d: a row has 5 cells (concept, owner, asked through, types, library): %q", n, line)
		}
		pkg := codes(cells[1])
		if len(pkg) == 0 {
			continue // the header and its separator
		}
		o := Owner{Concept: strings.TrimSpace(strings.Split(cells[0], "(")[0]), Package: pkg[0],
			Asked: codes(cells[2]), Types: codes(cells[3]), Line: n}
		if w := codes(cells[0]); len(w) > 0 {
			o.Word = w[0]
		}
		if lib := codes(cells[4]); len(lib) > 0 {
			o.Library, o.Also = lib[0], lib[1:]
		}
		if len(pkg) != 1 || len(o.Asked) == 0 {
			return nil, fmt.Errorf("line %d: one owner package and what it is asked through, got %q and %q", n, pkg, o.Asked)
		}
		out = append(out, o)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no \"## Who owns what\" table found")
	}
	return out, nil
}

// Decls are the exported declarations of the module's packages (their
// non-test files), by import path: type names, and functions, variables
// and constants by name, methods as "Type.Method".
type Decls map[string]map[string]bool

// Types returns, for each exported type name, the packages declaring it
// (by package name, as "pkgname.Type").
func (d Decls) Types(names map[string]string) map[string][]string {
	out := map[string][]string{}
	for path, ds := range d {
		for n := range ds {
			if strings.HasPrefix(n, "type ") {
				t := strings.TrimPrefix(n, "type ")
				out[t] = append(out[t], names[path]+"."+t)
			}
		}
	}
	return out
}

// LoadDecls parses every package of the module under root (with the
// build tags) and returns their exported declarations and package names.
func LoadDecls(root, tags string) (Decls, map[string]string, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Name,Dir,GoFiles", "-tags", tags, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %w", err)
	}
	decls, names := Decls{}, map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Name, Dir string
			GoFiles               []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, err
		}
		names[p.ImportPath] = p.Name
		ds := map[string]bool{}
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, nil, err
			}
			addDecls(ds, file)
		}
		decls[p.ImportPath] = ds
	}
	return decls, names, nil
}

func addDecls(ds map[string]bool, file *ast.File) {
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = recvType(d.Recv.List[0].Type) + "." + name
			}
			ds[name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						ds["type "+s.Name.Name] = true
						ds[s.Name.Name] = true
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							ds[n.Name] = true
						}
					}
				}
			}
		}
	}
}

// recvType is the name of a method's receiver type (T for T, *T, T[X]).
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// CheckOwner returns what is wrong with row o: the owner no package, a
// name it is asked through not declared by it, a type that does not
// exist, an exported type named Word that the row does not list, or a
// package other than the owner and Also that imports Library directly
// (imports maps each package, its tests included, to its direct imports).
func CheckOwner(o Owner, decls Decls, names map[string]string, imports map[string][]string) []string {
	var errs []string
	where := fmt.Sprintf("docs/architecture.md line %d (%s)", o.Line, o.Concept)
	owner := Module + "/" + o.Package
	ds, ok := decls[owner]
	if !ok {
		return []string{fmt.Sprintf("%s: owner %s is no package of the module", where, o.Package)}
	}
	for _, a := range o.Asked {
		_, name, _ := strings.Cut(a, ".")
		if pkgName, _, _ := strings.Cut(a, "."); pkgName == names[owner] {
			a = name // pkgname.Ident
		}
		if !ds[a] {
			errs = append(errs, fmt.Sprintf("%s: %s does not declare %s", where, o.Package, a))
		}
	}
	byName := map[string]string{}
	for path, n := range names {
		if strings.HasPrefix(path, Module+"/") {
			byName[n] = path
		}
	}
	for _, t := range o.Types {
		pkgName, typ, _ := strings.Cut(t, ".")
		if path, ok := byName[pkgName]; !ok || !decls[path]["type "+typ] {
			errs = append(errs, fmt.Sprintf("%s: no type %s in the module", where, t))
		}
	}
	if o.Word != "" {
		for _, t := range decls.Types(names)[o.Word] {
			if !contains(o.Types, t) {
				errs = append(errs, fmt.Sprintf("%s: %s is a type of the concept the row does not list (one type per layer: use a listed one, or list it and say why)", where, t))
			}
		}
	}
	if o.Library != "" {
		for p, imps := range imports {
			rel := strings.TrimPrefix(p, Module+"/")
			if p == owner || matchesAny(o.Also, p) {
				continue
			}
			for _, imp := range imps {
				if imp == o.Library || strings.HasPrefix(imp, o.Library+"/") {
					errs = append(errs, fmt.Sprintf("%s: %s imports %s, which only %s (and %s) may", where, rel, imp, o.Package, strings.Join(o.Also, ", ")))
					break
				}
			}
		}
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func matchesAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if Match(pat, p) {
			return true
		}
	}
	return false
}

// DirectImports returns each package's direct imports, those of its tests
// included, under the build tags.
func DirectImports(root, tags string) (map[string][]string, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", "-tags", tags, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		imports[p.ImportPath] = append(append(p.Imports, p.TestImports...), p.XTestImports...)
	}
	return imports, nil
}
