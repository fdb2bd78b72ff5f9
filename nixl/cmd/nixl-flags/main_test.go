package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// wheel lays out a wheel's library folder with libnixl_capi.so in site.
func wheel(t *testing.T, site, flavour string) string {
	t.Helper()
	lib := filepath.Join(site, "."+flavour+".mesonpy.libs")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(lib, "libnixl_capi.so"), nil, 0o644))
	return lib
}

func TestFindLibDir(t *testing.T) {
	empty, a, b := t.TempDir(), t.TempDir(), t.TempDir()
	cu12 := wheel(t, a, "nixl_cu12")
	cu13 := wheel(t, b, "nixl_cu13")
	// A folder without the C API library is no wheel gonixl can use.
	require.NoError(t, os.MkdirAll(filepath.Join(empty, ".nixl_cu13.mesonpy.libs"), 0o755))

	got, err := findLibDir([]string{"", empty, a, b}, []string{"nixl_cu13", "nixl_cu12"})
	require.NoError(t, err)
	require.Equal(t, cu13, got, "cu13 first, wherever it is on the path")

	got, err = findLibDir([]string{empty, a, b}, []string{"nixl_cu12"})
	require.NoError(t, err)
	require.Equal(t, cu12, got)

	_, err = findLibDir([]string{empty}, []string{"nixl_cu13", "nixl_cu12"})
	require.ErrorContains(t, err, "no NIXL wheel (nixl_cu13, nixl_cu12) with libnixl_capi.so found in "+empty)
}

func TestLDFlags(t *testing.T) {
	require.Equal(t, "-L/x/.nixl_cu13.mesonpy.libs -Wl,-rpath,/x/.nixl_cu13.mesonpy.libs", ldflags("/x/.nixl_cu13.mesonpy.libs"))
}
