package engine

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The layering rule: internal/ holds only what both connectors share, so
// nothing under it imports a connector, their public base (connector, which
// sits on top of internal/ and reaches it through engine.Public), an agent
// implementation or an example, in its code or its tests; neither connector's code imports the
// other; nothing but examples imports examples.
func TestImportGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Imports,TestImports,XTestImports,Module", "github.com/gonixl/gonixl/...").Output()
	require.NoError(t, err)
	const mod = "github.com/gonixl/gonixl/"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
			Module                             *struct{ Path string }
		}
		require.NoError(t, dec.Decode(&p))
		if p.Module == nil || p.Module.Path != strings.TrimSuffix(mod, "/") || strings.Contains(p.ImportPath, " ") || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		seen++
		rel := strings.TrimPrefix(p.ImportPath, mod)
		code := map[string]bool{}
		for _, imp := range p.Imports {
			code[imp] = true
		}
		for _, imp := range append(append(p.Imports, p.TestImports...), p.XTestImports...) {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			under := func(dir string) bool { return dep == dir || strings.HasPrefix(dep, dir+"/") }
			switch {
			case strings.HasPrefix(rel, "internal/") && (under("pullconn") || under("pushconn") || under("connector") || under("nixl/loopback") || under("examples") || under("promstats")):
				t.Errorf("%s imports %s: internal/ holds only shared machinery and imports no connector, agent implementation or example", rel, dep)
			case !strings.HasPrefix(rel, "examples") && under("examples"):
				t.Errorf("%s imports %s: only examples import examples", rel, dep)
			case code[imp] && (under("pullconn") && strings.HasPrefix(rel, "pushconn") || under("pushconn") && strings.HasPrefix(rel, "pullconn")):
				// Their tests may meet (a push engine refusing a pull peer).
				t.Errorf("%s imports %s: the connectors are independent", rel, dep)
			}
		}
	}
	require.Greater(t, seen, 10, "go list found the module's packages")
}
