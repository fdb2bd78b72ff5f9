package nixl

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// missingNIXLMsg is what shim.cc's #error says when nixl.h cannot be found.
const missingNIXLMsg = "gonixl: -tags nixlcxx needs NIXL's C++ headers: nixl.h not found under /opt/nvidia/nvda_nixl/include"

// TestBuildWithoutNIXLSaysWhatToInstall builds with -tags nixl against a
// NIXL prefix that is an empty directory and checks what the build says: for
// the C++ binding (nixlcxx), shim.cc's message rather than a bare "nixl.h:
// No such file or directory"; for the default binding over the C API, which
// needs no header, the linker naming the library it did not find. The
// package's sources are copied into a scratch module with the cgo
// preambles' prefix pointed at the empty directory, since the real
// /opt/nvidia/nvda_nixl may be installed on the machine running the test.
func TestBuildWithoutNIXLSaysWhatToInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with a C and a C++ compiler")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("no C++ compiler (%s): %v", cxx, err)
	}

	empty := t.TempDir()
	mod := t.TempDir()
	pkg := filepath.Join(mod, "nixl")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module github.com/gonixl/gonixl\n\ngo 1.26\n"), 0o644))
	files, err := filepath.Glob("*")
	require.NoError(t, err)
	prefixed := map[string]bool{}
	for _, f := range files {
		ext := filepath.Ext(f)
		if strings.HasSuffix(f, "_test.go") || !(ext == ".go" || ext == ".c" || ext == ".cc" || ext == ".h") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if ext == ".go" && strings.Contains(string(b), "#cgo") && strings.Contains(string(b), "/opt/nvidia/nvda_nixl") {
			prefixed[f] = true
			b = []byte(strings.ReplaceAll(string(b), "/opt/nvidia/nvda_nixl", empty))
		}
		require.NoError(t, os.WriteFile(filepath.Join(pkg, f), b, 0o644))
	}
	require.True(t, prefixed["cgo_capi_nixl.go"] && prefixed["cgo_cxx_nixl.go"], "a cgo preamble no longer names the default prefix: %v", prefixed)
	// A program, so that the C API binding is linked, which is where a
	// missing library shows.
	main := filepath.Join(mod, "cmd", "probe")
	require.NoError(t, os.MkdirAll(main, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(main, "main.go"), []byte("package main\n\nimport \"github.com/gonixl/gonixl/nixl\"\n\nfunc main() { _, _ = nixl.New(\"probe\", nixl.Config{}) }\n"), 0o644))

	build := func(tags string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", os.DevNull, "-tags", tags, "./cmd/probe")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(),
			"CGO_ENABLED=1", "CGO_CFLAGS=", "CGO_CXXFLAGS=", "CGO_CPPFLAGS=", "CGO_LDFLAGS=", "CXX="+cxx,
			"LIBRARY_PATH=", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "GOPROXY=off")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Skipf("the build found NIXL on the compiler's default paths; nothing to check:\n%s", out)
		}
		return string(out)
	}

	t.Run("CAPI", func(t *testing.T) {
		out := build("nixl")
		require.Contains(t, out, "-lnixl_capi", "go build output:\n%s", out)
		require.NotContains(t, out, "nixl.h", "the C API binding needs no header:\n%s", out)
	})
	t.Run("CXX", func(t *testing.T) {
		out := build("nixl,nixlcxx")
		require.Contains(t, out, missingNIXLMsg, "go build output:\n%s", out)
		require.NotContains(t, out, "No such file or directory", "the compiler went on to the bare include error:\n%s", out)
		require.Equal(t, 1, strings.Count(out, "error:"), "the message should be the only error, not the first of a cascade:\n%s", out)
	})
}
