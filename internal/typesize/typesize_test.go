package typesize

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600))
	}
	write("a.go", "package p\n\n// T is.\ntype T struct {\n\tx int\n}\n\nfunc (t *T) A() {\n\t_ = t\n}\n")
	write("b.go", "package p\n\nfunc (T) B() {}\n\ntype G[X any] struct{}\n\nfunc (g G[X]) C() {\n}\n\nfunc free() {}\n")
	write("b_test.go", "package p\n\nfunc (T) Test() {\n\n\n}\n")
	got, err := Lines(dir)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"T": 3 + 3 + 1, "G": 1 + 2}, got)

	write("c.go", "package p\nfunc (")
	_, err = Lines(dir)
	require.Error(t, err)
}
