package pushconn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// maxTypeLines bounds a type of this package: its declaration and its
// methods, across files, in lines (comments above them not counted). A
// type that outgrows it does more than one thing: the writer did (1,387
// lines), until its protocol became writeCore and the Consumer's glue
// decodeCore.
const maxTypeLines = 600

func TestNoTypeOverMaxLines(t *testing.T) {
	fs := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fs, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	lines := func(n ast.Node) int { return fs.Position(n.End()).Line - fs.Position(n.Pos()).Line + 1 }
	size := map[string]int{}
	for _, f := range files {
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
				if id, ok := typ.(*ast.Ident); ok {
					size[id.Name] += lines(d)
				}
			}
		}
	}
	if size["writeCore"] == 0 || size["decodeCore"] == 0 {
		t.Fatalf("the writer or the decode core was not found: %v", size)
	}
	for name, n := range size {
		if n > maxTypeLines {
			t.Errorf("type %s spans %d lines with its methods, more than %d: split it along what its parts do", name, n, maxTypeLines)
		}
	}
}
