//go:build nixl

package twohost

import (
	"encoding/json"
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
// (libfabric's tcp/sockets providers), with the pull connector: prefill in one namespace,
// decode, proxy and the benchmark in the other. It skips, with the script's
// reason, when not root or without NIXL, iproute2 or namespaces. The
// script itself fails on any wrong completion text, failed request, KV
// verify failure, socket off 10.200.0.0/30 or loopback, or KV bytes that did
// not cross the veth, or a program that did not exit 0 on SIGTERM; the test
// checks it said so for each backend, reads the bench's JSON (20 of 20
// requests with 512 input and 16 output tokens) and checks that the
// namespaces and the veth are gone afterwards.
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
		assert.Regexp(t, `twohost: `+b+` ok: \d+ NIXL transfers \(mean [0-9.]+ ms each\), decode verified [1-9]\d* KV bytes, 0 verify failures; prefill's veth end sent \d+ bytes`, stdout)
	}
	for _, b := range []string{"UCX", "LIBFABRIC"} {
		// The bench's result: every request ended with its 16 tokens.
		files, err := filepath.Glob(filepath.Join(out, "bench-"+b, "*.json"))
		require.NoError(t, err)
		require.Len(t, files, 1, "one bench result for %s", b)
		raw, err := os.ReadFile(files[0])
		require.NoError(t, err)
		var res struct {
			NumPrompts int   `json:"num_prompts"`
			Completed  int   `json:"completed"`
			Failed     int   `json:"failed"`
			InputLens  []int `json:"input_lens"`
			OutputLens []int `json:"output_lens"`
		}
		require.NoError(t, json.Unmarshal(raw, &res), "%s", files[0])
		assert.Equal(t, 20, res.NumPrompts, b)
		assert.Equal(t, 20, res.Completed, b)
		assert.Equal(t, 0, res.Failed, b)
		assert.Len(t, res.OutputLens, 20, b)
		for i, n := range res.OutputLens {
			assert.Equal(t, 16, n, "%s request %d output tokens", b, i)
			assert.Equal(t, 512, res.InputLens[i], "%s request %d input tokens", b, i)
		}
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
