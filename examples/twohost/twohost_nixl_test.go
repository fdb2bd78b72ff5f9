//go:build nixl

package twohost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTwoHostScript runs run.sh over both backends, UCX (TCP) and LIBFABRIC
// (sockets provider), with the pull connector: prefill in one namespace,
// decode, proxy and the benchmark in the other. It skips, with the script's
// reason, when not root or without NIXL, iproute2 or namespaces. The
// script itself fails on any wrong completion text, failed request, KV
// verify failure, socket off 10.200.0.0/30 or loopback, or KV bytes that did
// not cross the veth; the test checks it said so for each backend and that
// the namespaces and the veth are gone afterwards.
func TestTwoHostScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs and runs them in two network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("TestTwoHostScript needs root (ip netns, veth): run the nixl-tagged tests as root")
	}
	name := fmt.Sprintf("gnxt%d", os.Getpid()%1000000)
	out := t.TempDir()
	rc, stdout, stderr := runScript(t, nil, nil, []string{"-backend", "both", "-connector", "pull", "-out", out, "-name", name})
	t.Logf("run.sh output:\n%s", stdout)
	if rc == exitSkip {
		t.Skip(strings.TrimSpace(stderr))
	}
	if rc != 0 {
		for _, f := range []string{"prefill-UCX.log", "decode-UCX.log", "prefill-LIBFABRIC.log", "decode-LIBFABRIC.log"} {
			if b, err := os.ReadFile(filepath.Join(out, f)); err == nil {
				t.Logf("%s (last 4 KiB):\n%s", f, b[max(0, len(b)-4096):])
			}
		}
	}
	require.Equal(t, 0, rc, "run.sh failed; stderr:\n%s", stderr)
	for _, b := range []string{"UCX", "LIBFABRIC"} {
		assert.Contains(t, stdout, "twohost: 4 completions of 512 tokens through the proxy: HTTP 200, 16 tokens each, text equal to decode's local answers", b)
		assert.Regexp(t, `twohost: `+b+` ok: \d+ NIXL transfers, decode verified [1-9]\d* KV bytes, 0 verify failures; prefill's veth end sent \d+ bytes`, stdout)
	}
	assert.Contains(t, stdout, "twohost: PASS: UCX LIBFABRIC")
	assert.Contains(t, stdout, "twohost: removed namespaces "+name+"-p "+name+"-d")
	for _, ns := range []string{name + "-p", name + "-d"} {
		assert.NoFileExists(t, "/run/netns/"+ns, "namespace %s left behind", ns)
	}
	for _, dev := range []string{name + "p", name + "d"} {
		assert.Error(t, exec.Command("ip", "link", "show", dev).Run(), "veth %s left on the host", dev)
	}
}
