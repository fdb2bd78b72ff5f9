//go:build nixl

package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/discovery/etcdtest"
	"github.com/gonixl/gonixl/examples/stack"
)

// TestChaosProcesses is TestChaos with every engine and the proxy a separate process over
// NIXL (UCX on lo), found through a real etcd: engines are killed with SIGKILL (their
// registration expires with its lease) and started again under their id.
func TestChaosProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	srv := etcdtest.Start(t)
	bin := t.TempDir()
	if _, err := stack.BuildPrograms(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) { chaosProcesses(t, bin, srv.Endpoint, mode) })
	}
}

// process is one program of the test and its JSON log.
type process struct {
	id, role string
	cmd      *exec.Cmd
	log      string
	done     chan struct{}
	url      string
}

var processEnv = []string{"UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR", "UCX_LOG_LEVEL=error", "UCX_ERROR_SIGNALS="}

func startProcess(t *testing.T, bin, name, id string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), id+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), processEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{id: id, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s log (end):\n%s", id, b)
		}
	})
	return p
}

// logLine waits up to 60 s for p's log line with msg and returns it.
func logLine(t *testing.T, p *process, msg string) map[string]any {
	t.Helper()
	m, err := stack.LogLine(context.Background(), p.log, msg, "", 60*time.Second, p.done)
	if err != nil {
		t.Fatalf("%s: %v", p.id, err)
	}
	return m
}

// gauge reads one unlabelled-by-us gauge of an engine's /metrics.
func gauge(c *http.Client, url, name string) (float64, error) {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics has no %s", url, name)
}

func chaosProcesses(t *testing.T, bin, etcd, mode string) {
	const requests, rate = 300, 50.0
	seed := chaosSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cluster := "chaos-proc-" + mode
	engineArgs := func(role, id string) []string {
		return []string{"-role", role, "-engine-id", id, "-connector", mode, "-port", "0", "-side-channel-port", "0",
			"-agent", "nixl", "-nixl-backend", "UCX", "-nixl-backend-params", "ucx_error_handling_mode=peer",
			"-model", "qwen2.5-7b", "-layers", "2", "-head-dim", "64", "-num-blocks", "256", "-compute-scale", "0.2",
			"-served-model-name", chaosModel.Name, "-lease", chaosHold.String(), "-request-timeout", chaosEngineWait.String(),
			"-etcd", etcd, "-cluster", cluster, "-etcd-ttl", "1s", "-connector-log=false"}
	}
	var mu sync.Mutex
	live := map[string]*process{}
	startEngine := func(role, id string) {
		p := startProcess(t, bin, "engine", id, engineArgs(role, id)...)
		p.role = role
		p.url = logLine(t, p, "ready")["url"].(string)
		logLine(t, p, "registered in etcd")
		mu.Lock()
		live[id] = p
		mu.Unlock()
	}
	ids := []struct{ role, id string }{{"prefill", "prefill-0"}, {"prefill", "prefill-1"}, {"prefill", "prefill-2"},
		{"decode", "decode-0"}, {"decode", "decode-1"}}
	for _, e := range ids {
		startEngine(e.role, e.id)
	}
	httpc := &http.Client{Timeout: chaosClientWait, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer httpc.CloseIdleConnections()

	// The text of every prompt, served by a decode engine alone.
	prompts, want := chaosPrompts(t, httpc, live["decode-0"].url, 20)

	proxy := startProcess(t, bin, "proxy", "proxy", "-port", "0", "-etcd", etcd, "-cluster", cluster, "-connector", mode,
		"-health-interval", "200ms", "-request-timeout", chaosProxyTimeout.String())
	proxyURL := "http://" + logLine(t, proxy, "listening")["addr"].(string)
	waitHealthy(t, httpc, proxyURL, 30*time.Second)

	// Every 0.5-1.5 s an engine of each role in turn gets SIGKILL, one of each role staying
	// up; it starts again under its id 0.5-2 s later.
	loadDone := make(chan struct{})
	chaosDone := make(chan struct{})
	var restarts sync.WaitGroup
	killed := map[string]int{}
	go func() {
		defer close(chaosDone)
		for k := 0; ; k++ {
			pause := time.Duration(500+rng.IntN(1000)) * time.Millisecond
			back := time.Duration(500+rng.IntN(1500)) * time.Millisecond
			role := []string{"prefill", "decode"}[k%2]
			pick := rng.IntN(3)
			select {
			case <-loadDone:
				return
			case <-time.After(pause):
			}
			mu.Lock()
			var cands []*process
			for _, e := range ids {
				if p := live[e.id]; p != nil && p.role == role {
					cands = append(cands, p)
				}
			}
			if len(cands) < 2 {
				mu.Unlock()
				continue
			}
			p := cands[pick%len(cands)]
			delete(live, p.id)
			mu.Unlock()
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			killed[role]++
			restarts.Go(func() {
				time.Sleep(back)
				startEngine(p.role, p.id)
			})
		}
	}()

	start := time.Now()
	results := sendLoad(t, httpc, proxyURL, prompts, want, requests, rate)
	close(loadDone)
	<-chaosDone
	restarts.Wait()
	loadTime := time.Since(start)

	// No block held on any engine up now (kv_cache_usage_perc is blocks in use / blocks).
	held := 0.0
	drainFor := chaosDrainFor(mode)
	drainStart := time.Now()
	deadline := drainStart.Add(drainFor)
	for {
		held = 0
		for _, p := range live {
			u, err := gauge(httpc, p.url, "vllm:kv_cache_usage_perc")
			if err != nil {
				t.Fatal(err)
			}
			held += math.Round(u * 256) // -num-blocks
		}
		if held == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	drained := time.Since(drainStart)
	out := tallyResults(t, results)

	// Graceful ends: the proxy's counters, and every engine's KV check.
	_ = proxy.cmd.Process.Signal(syscall.SIGTERM)
	ps := logLine(t, proxy, "stopped")
	var verifyFailures float64
	for _, p := range live {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		verifyFailures += logLine(t, p, "stopped")["kv_verify_failures"].(float64)
	}
	t.Logf("chaos processes %s (seed %d): %d requests in %s at %.0f/s: %d succeeded, %d failed with a clear error, %d unclear; proxy: %v retried, %v failed; engines killed (SIGKILL): %v; blocks left held: %v (after %s)",
		mode, seed, requests, loadTime.Round(time.Millisecond), rate, out.counts[succeeded], out.counts[failedClearly], out.counts[unclear],
		ps["retried"], ps["failed"], killed, held, drained.Round(time.Millisecond))
	out.report(t)
	if held != 0 {
		t.Errorf("%v blocks still held on live engines", held)
	}
	if ps["requests"].(float64) != requests {
		t.Errorf("proxy saw %v requests, the clients sent %d", ps["requests"], requests)
	}
	if out.counts[succeeded] < requests/2 {
		t.Errorf("only %d of %d requests succeeded", out.counts[succeeded], requests)
	}
	if killed["prefill"] == 0 || killed["decode"] == 0 {
		t.Errorf("the schedule killed %v: want prefill and decode engines killed", killed)
	}
	if verifyFailures != 0 {
		t.Errorf("%v decoded requests read wrong KV bytes", verifyFailures)
	}
}
