// Package typesize measures the types of a package in lines, for the
// tests that keep each type of a connector to one concern.
package typesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// Lines returns, for each type declared in the non-test Go files of dir,
// the lines of its declaration and its methods, across files (comments
// above them not counted).
func Lines(dir string) (map[string]int, error) {
	fs := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	lines := func(n ast.Node) int { return fs.Position(n.End()).Line - fs.Position(n.Pos()).Line + 1 }
	size := map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						size[ts.Name.Name] += lines(ts)
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil {
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok { // a generic type's method
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					size[id.Name] += lines(d)
				}
			}
		}
	}
	return size, nil
}
