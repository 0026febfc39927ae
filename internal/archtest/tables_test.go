package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoExportedMutableTables: no package exports a package-level slice
// or map variable. Such a "one list" table can be changed by any importer
// (a test's append, a caller's sort) and every reader after sees it; the
// tables are unexported behind accessors that return copies (issue 37).
func TestNoExportedMutableTables(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "test", rel == "plugins/flannel", rel == "plugins/netpol",
				strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "vendor", d.Name() == "out":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil // nothing imports a command
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() {
						continue
					}
					if isSliceOrMap(vs.Type) || (i < len(vs.Values) && isSliceOrMapLit(vs.Values[i])) {
						t.Errorf("%s: exported package-level slice or map %s: unexport it behind an accessor that returns a copy", fset.Position(name.Pos()), name.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isSliceOrMap(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.ArrayType:
		return e.Len == nil
	case *ast.MapType:
		return true
	}
	return false
}

func isSliceOrMapLit(e ast.Expr) bool {
	cl, ok := e.(*ast.CompositeLit)
	return ok && isSliceOrMap(cl.Type)
}
