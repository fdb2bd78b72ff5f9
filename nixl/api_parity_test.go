package nixl

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNativeAPIParity checks that the stub (default build) offers exactly
// the exported functions and NativeAgent methods of the real agent (`nixl`
// build), with the same signatures, so user code compiles in both builds.
func TestNativeAPIParity(t *testing.T) {
	stub := exportedAPI(t, []string{"native_stub.go"})
	files, err := filepath.Glob("*_nixl.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	native := exportedAPI(t, files)
	assert.Equal(t, native, stub)
}

// TestNativeMethodDocsNameNIXLCalls checks that every exported method of the
// real agent says in its doc comment which nixlAgent call it wraps, so the
// coverage can be read off `go doc`.
func TestNativeMethodDocsNameNIXLCalls(t *testing.T) {
	files, err := filepath.Glob("*_nixl.go")
	require.NoError(t, err)
	exempt := map[string]bool{"Name": true, "Config": true}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() || exempt[fd.Name.Name] {
				continue
			}
			doc := fd.Doc.Text()
			assert.Regexp(t, `nixlAgent::~?[a-zA-Z]+`, doc, "%s: %s", name, fd.Name.Name)
		}
	}
}

func exportedAPI(t *testing.T, files []string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	api := map[string]string{}
	for _, name := range files {
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				key := d.Name.Name
				if d.Recv != nil {
					key = typeString(t, fset, d.Recv.List[0].Type) + "." + key
				}
				api[key] = signature(t, fset, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						api["type "+ts.Name.Name] = "declared"
					}
				}
			}
		}
	}
	return api
}

// signature prints a function type with parameter names removed.
func signature(t *testing.T, fset *token.FileSet, ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var parts []string
		for _, f := range fl.List {
			n := max(len(f.Names), 1)
			for range n {
				parts = append(parts, typeString(t, fset, f.Type))
			}
		}
		return strings.Join(parts, ", ")
	}
	return "(" + list(ft.Params) + ") (" + list(ft.Results) + ")"
}

func typeString(t *testing.T, fset *token.FileSet, e ast.Expr) string {
	var b bytes.Buffer
	require.NoError(t, printer.Fprint(&b, fset, e))
	return b.String()
}
