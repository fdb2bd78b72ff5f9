// Command nixl-flags prints the cgo linker flags that build gonixl's
// nixl-tagged binding against the NIXL of a Python wheel (nixl-cu13 or
// nixl-cu12, which `pip install nixl` brings):
//
//	CGO_LDFLAGS="$(go run github.com/gonixl/gonixl/nixl/cmd/nixl-flags)" go build -tags nixl ./...
//
// The flags name the wheel's library folder (site-packages/.nixl_cu13.mesonpy.libs,
// which holds libnixl_capi.so, libnixl.so and the plugins/ NIXL loads from
// beside it) for the linker and, as an rpath, for the loader, so the
// program needs no LD_LIBRARY_PATH.
//
// Without -dir it searches the folders on the module search path (sys.path)
// of the Python named by $PYTHON, else python3: the environment pip
// installed the wheel into. With -dir it searches that folder only (a
// site-packages, or pip install --target's folder). nixl_cu13 is preferred
// to nixl_cu12, as the nixl package does on a machine without CUDA; -cuda
// picks one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	dir := flag.String("dir", "", "search only this folder (site-packages or pip --target), without asking Python")
	cuda := flag.String("cuda", "", `the wheel's CUDA major version, "13" or "12" (default: 13, else 12)`)
	flag.Parse()

	flavours := []string{"nixl_cu13", "nixl_cu12"}
	switch *cuda {
	case "":
	case "12", "13":
		flavours = []string{"nixl_cu" + *cuda}
	default:
		fail(fmt.Errorf("-cuda %q: want 12 or 13", *cuda))
	}
	dirs := []string{*dir}
	if *dir == "" {
		var err error
		if dirs, err = pythonPath(); err != nil {
			fail(err)
		}
	}
	lib, err := findLibDir(dirs, flavours)
	if err != nil {
		fail(err)
	}
	fmt.Println(ldflags(lib))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nixl-flags:", err)
	os.Exit(1)
}

// pythonPath returns the Python's sys.path.
func pythonPath() ([]string, error) {
	py := os.Getenv("PYTHON")
	if py == "" {
		py = "python3"
	}
	out, err := exec.Command(py, "-c", `import sys; print("\n".join(sys.path))`).Output()
	if err != nil {
		return nil, fmt.Errorf("asking %s for its sys.path (set PYTHON, or pass -dir): %w", py, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// findLibDir returns the first wheel library folder, .<flavour>.mesonpy.libs,
// holding libnixl_capi.so in one of dirs, trying the flavours in order.
func findLibDir(dirs, flavours []string) (string, error) {
	for _, f := range flavours {
		for _, d := range dirs {
			if d == "" {
				continue
			}
			lib := filepath.Join(d, "."+f+".mesonpy.libs")
			if _, err := os.Stat(filepath.Join(lib, "libnixl_capi.so")); err == nil {
				return filepath.Abs(lib)
			}
		}
	}
	return "", errors.New("no NIXL wheel (" + strings.Join(flavours, ", ") + ") with libnixl_capi.so found in " +
		strings.Join(dirs, ", ") + `; install one with "pip install nixl"`)
}

// ldflags links the library folder and records it as the rpath.
func ldflags(lib string) string {
	return "-L" + lib + " -Wl,-rpath," + lib
}
