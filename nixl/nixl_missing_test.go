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
const missingNIXLMsg = "gonixl: -tags nixl needs NIXL installed: nixl.h not found under /opt/nvidia/nvda_nixl/include"

// TestBuildWithoutNIXLSaysWhatToInstall builds this package with -tags nixl
// against a NIXL prefix that is an empty directory and checks that the
// compiler stops at shim.cc's message, not at a bare "nixl.h: No such file
// or directory". The package's sources are copied into a scratch module with
// the cgo preamble's prefix pointed at the empty directory, since the real
// /opt/nvidia/nvda_nixl may be installed on the machine running the test.
func TestBuildWithoutNIXLSaysWhatToInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with a C++ compiler")
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
	copied := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || !(strings.HasSuffix(f, ".go") || strings.HasSuffix(f, ".cc") || strings.HasSuffix(f, ".h")) {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if f == "shim_nixl.go" {
			require.Contains(t, string(b), "/opt/nvidia/nvda_nixl", "the cgo preamble no longer names the default prefix")
			b = []byte(strings.ReplaceAll(string(b), "/opt/nvidia/nvda_nixl", empty))
		}
		require.NoError(t, os.WriteFile(filepath.Join(pkg, f), b, 0o644))
		copied++
	}
	require.NotZero(t, copied)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "nixl", "./nixl")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=1", "CGO_CXXFLAGS=", "CGO_CPPFLAGS=", "CGO_LDFLAGS=", "CXX="+cxx,
		"GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Skipf("the build found nixl.h on the compiler's default include path; nothing to check:\n%s", out)
	}
	require.Contains(t, string(out), missingNIXLMsg, "go build output:\n%s", out)
	require.NotContains(t, string(out), "No such file or directory", "the compiler went on to the bare include error:\n%s", out)
	require.Equal(t, 1, strings.Count(string(out), "error:"), "the message should be the only error, not the first of a cascade:\n%s", out)
}
