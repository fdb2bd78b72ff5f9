//go:build nixl

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/stack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The three programs as separate processes over NIXL, as a user runs them:
// prefill and decode engines (examples/engine) and the proxy
// (examples/proxy), on 127.0.0.1, for each connector and backend. Every
// completion's text is checked against the same prompt served locally by
// the decode engine (the text is derived from the KV bytes decode holds),
// and decode's log must report no KV mismatch.
func TestThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := t.TempDir()
	_, err := stack.BuildPrograms(context.Background(), bin)
	require.NoError(t, err)
	for _, tc := range []struct {
		backend, connector, protocol string
		prefillPP                    int
	}{
		{"UCX", "pull", "gonixl", 1}, {"UCX", "push", "gonixl", 1}, {"LIBFABRIC", "pull", "gonixl", 1},
		{"UCX", "pull", "vllm", 1}, {"LIBFABRIC", "pull", "vllm", 1},
		{"UCX", "push", "vllm", 1}, {"LIBFABRIC", "push", "vllm", 1},
		{"UCX", "push", "gonixl", 2}, // a prefill of 2 pipeline stages x TP 2
	} {
		name := tc.backend + "/" + tc.connector + "/" + tc.protocol
		if tc.prefillPP > 1 {
			name += fmt.Sprintf("/prefill-pp%d", tc.prefillPP)
		}
		t.Run(name, func(t *testing.T) {
			runThreeProcesses(t, bin, tc.backend, tc.connector, tc.protocol, tc.prefillPP)
		})
	}
}

// logged waits for p's JSON log line with msg and returns its field key.
func logged(t *testing.T, p *proc, msg, key string) string {
	t.Helper()
	v, err := stack.LogField(context.Background(), p.log, msg, key, 60*time.Second)
	require.NoError(t, err)
	return v
}

func port(t *testing.T, url string) int {
	_, ps, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	n, err := strconv.Atoi(ps)
	require.NoError(t, err)
	return n
}

type proc struct {
	cmd *exec.Cmd
	log string
}

func start(t *testing.T, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }() //nolint:errcheck
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	require.NoError(t, stack.WaitHealthy(context.Background(), url, 60*time.Second))
}

func runThreeProcesses(t *testing.T, bin, backend, connector, protocol string, prefillPP int) {
	env := []string{"UCX_NET_DEVICES=lo", "FI_TCP_IFACE=lo", "FI_SOCKETS_IFACE=lo", "NIXL_LOG_LEVEL=ERROR", "UCX_LOG_LEVEL=error", "UCX_ERROR_SIGNALS="}
	model := []string{"-model", "qwen2.5-7b", "-layers", "4", "-head-dim", "64", "-tp", "2", "-num-blocks", "256",
		"-served-model-name", demoModel.Name, "-agent", "nixl", "-nixl-backend", backend, "-connector", connector, "-connector-log=false",
		"-protocol", protocol, "-vllm-version", "0.0.0"}
	// Every port is 0, a free one the program picks itself and logs (ports
	// probed first can be taken by another socket before the program binds).
	prefill := start(t, bin, "engine", env, append(model, "-role", "prefill", "-engine-id", "prefill-p", "-port", "0", "-side-channel-port", "0",
		"-pp", strconv.Itoa(prefillPP))...)
	decode := start(t, bin, "engine", env, append(model, "-role", "decode", "-engine-id", "decode-p", "-port", "0", "-side-channel-port", "0")...)
	prefillURL := logged(t, prefill, "ready", "url")
	decodeURL := logged(t, decode, "ready", "url")
	waitHealthy(t, prefillURL+"/health")
	waitHealthy(t, decodeURL+"/health")
	proxy := start(t, bin, "proxy", env, "-port", "0", "-connector", connector,
		"-prefill", strings.TrimPrefix(prefillURL, "http://"), "-decode", strings.TrimPrefix(decodeURL, "http://"))
	proxyURL := "http://" + logged(t, proxy, "listening", "addr")
	waitHealthy(t, proxyURL+"/healthcheck")
	pHTTP, dHTTP := port(t, prefillURL), port(t, decodeURL)

	ctx := context.Background()
	const n = 6
	got := load(ctx, proxyURL, demoModel.Name, n, 0, 48, 6, 5)
	local := load(ctx, fmt.Sprintf("http://127.0.0.1:%d", dHTTP), demoModel.Name, n, 0, 48, 6, 5) // no kv_transfer_params: served locally
	for i := range got {
		require.NoError(t, got[i].err, "through the proxy")
		require.NoError(t, local[i].err, "locally")
		assert.Equal(t, local[i].text, got[i].text, "request %d: the text follows from the KV decode holds", i)
	}
	// The KV went through NIXL: decode's READs (pull) or prefill's WRITEs
	// (push) are in that engine's metrics.
	mover := dHTTP
	if connector == "push" {
		mover = pHTTP
	}
	moved := transfers(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", mover))
	assert.GreaterOrEqual(t, moved, float64(n))
	t.Logf("%s %s (%s protocol): %d completions through the proxy, text equal to local runs; %v NIXL transfers on the %s engine", backend, connector, protocol, n, moved, map[bool]string{true: "prefill", false: "decode"}[connector == "push"])
	if backend == "LIBFABRIC" {
		for _, p := range []*proc{prefill, decode} {
			addrs := tcpAddrs(t, p.cmd.Process.Pid)
			t.Logf("engine pid %d TCP sockets: %v", p.cmd.Process.Pid, addrs)
			for _, a := range addrs {
				assert.True(t, strings.HasPrefix(a, "127.0.0.1:") || a == "0.0.0.0:0", "engine pid %d uses %s: LIBFABRIC must stay on loopback", p.cmd.Process.Pid, a)
			}
		}
	}
}

// tcpAddrs returns the local and remote IPv4 addresses of pid's TCP sockets
// (from /proc: its socket inodes, matched in its /proc/<pid>/net/tcp).
func tcpAddrs(t *testing.T, pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || !inodes[fields[9]] {
			continue
		}
		for _, hexAddr := range fields[1:3] {
			out = append(out, decodeProcAddr(hexAddr))
		}
	}
	require.NotEmpty(t, out, "pid %d has no TCP socket", pid)
	return out
}

func decodeProcAddr(s string) string {
	ipHex, portHex, _ := strings.Cut(s, ":")
	ip, _ := strconv.ParseUint(ipHex, 16, 32)
	port, _ := strconv.ParseUint(portHex, 16, 16)
	return fmt.Sprintf("%d.%d.%d.%d:%d", ip&0xff, ip>>8&0xff, ip>>16&0xff, ip>>24, port)
}

// transfers sums vllm:nixl_xfer_time_seconds_count over an engine's ranks.
func transfers(t *testing.T, url string) float64 {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "vllm:nixl_xfer_time_seconds_count") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}
