//go:build nixl

package vllmpeer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
)

// proc is the peer program running as a process of its own; events are
// its JSON lines on stdout.
type proc struct {
	cmd    *exec.Cmd
	events chan map[string]any
	exited chan struct{} // closed once the process ended; err is then its exit
	err    error
	log    *strings.Builder
}

var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildPeer builds cmd/vllmpeer with -tags nixl, once for all tests.
func buildPeer(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "vllmpeer")
		if err != nil {
			built.err = err
			return
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		built.bin = filepath.Join(dir, "vllmpeer")
		if out, err := exec.Command("go", "build", "-tags", "nixl", "-o", built.bin, "./cmd/vllmpeer").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build -tags nixl ./cmd/vllmpeer: %v\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

var ucxEnv = []string{"UCX_NET_DEVICES=lo", "UCX_LOG_LEVEL=error", "NIXL_LOG_LEVEL=ERROR", "UCX_ERROR_SIGNALS="}

func startPeer(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	model := []string{"-model", testModel.Name, "-layers", strconv.Itoa(testModel.Layers), "-kv-heads", strconv.Itoa(testModel.KVHeads),
		"-head-dim", strconv.Itoa(testModel.HeadDim), "-block-size", strconv.Itoa(testModel.BlockSize), "-num-blocks", strconv.Itoa(testModel.NumBlocks),
		"-vllm-version", vllmVersion, "-agent", "nixl", "-nixl-backend", "UCX", "-timeout", "60s"}
	cmd := exec.Command(bin, append(model, args...)...)
	cmd.Env = append(os.Environ(), ucxEnv...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &proc{cmd: cmd, events: make(chan map[string]any, 16), exited: make(chan struct{}), log: &strings.Builder{}}
	cmd.Stderr = p.log
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.events <- m
			}
		}
		close(p.events)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("vllmpeer stderr:\n%s", p.log)
		}
	})
	return p
}

// next waits for the next event named name; an "error" event fails.
func (p *proc) next(t *testing.T, name string) map[string]any {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m, ok := <-p.events:
			require.True(t, ok, "vllmpeer exited before %q; stderr:\n%s", name, p.log)
			require.NotEqual(t, "error", m["event"], "vllmpeer: %v", m["error"])
			if m["event"] == name {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q event from vllmpeer within 60 s", name)
		}
	}
}

func (p *proc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		require.NoError(t, p.err, "vllmpeer's exit; stderr:\n%s", p.log)
	case <-time.After(60 * time.Second):
		t.Fatal("vllmpeer did not exit within 60 s")
	}
}

func nativeAgent(t *testing.T) func(string) (nixl.Agent, error) {
	for _, kv := range ucxEnv {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	suffix := fmt.Sprintf("-%d-%d", os.Getpid(), time.Now().UnixNano())
	return func(name string) (nixl.Agent, error) {
		a, err := nixl.New(name+suffix, nixl.Config{})
		if err != nil {
			return nil, err
		}
		// NIXL's default parameters, as the peer process (and a vLLM
		// engine) create theirs: UCX refuses endpoints of different error
		// handling modes.
		if err := a.CreateBackend("UCX", nil); err != nil {
			a.Close()
			return nil, err
		}
		return a, nil
	}
}

// The peer as a separate process, a vLLM prefill, and a gonixl decode of
// TP 2 in this process, over NIXL's UCX backend on 127.0.0.1: every byte
// verified, and the peer frees the request on exactly the two
// completions "<id>:2".
func TestProcessPeerPrefillGonixlDecode(t *testing.T) {
	bin := buildPeer(t)
	newAgent := nativeAgent(t)
	text, toks := prompt(70)
	peer := startPeer(t, bin, "-role", "pull-prefill", "-engine-id", "peer-prefill", "-prompt", text, "-blocks", "3,4,5,6,7")
	peer.next(t, "ready")
	raw, err := json.Marshal(peer.next(t, "params")["kv_transfer_params"])
	require.NoError(t, err)
	dec := newGonixlOn(t, newAgent, "decode", 2, false)
	vp := paramsFromJSON(t, raw)
	dblocks := blocksFrom(20, 5)
	for _, c := range dec.cons {
		require.NoError(t, c.Load("dreq-1", pullconnParams(t, vp), dblocks))
	}
	for i, r := range dec.results(t, "dreq-1") {
		require.NoError(t, r.Err, "decode rank %d", i)
	}
	dec.verify(t, toks, dblocks)
	done := peer.next(t, "done")
	rep := done["report"].(map[string]any)
	assert.Equal(t, []any{"vllmpeer-req-0a1b2c3d"}, rep["Freed"])
	var notifs []any
	for _, n := range rep["Notifs"].([]any)[0].([]any) {
		if !strings.HasPrefix(n.(string), "HB:") {
			notifs = append(notifs, n)
		}
	}
	assert.Equal(t, []any{"vllmpeer-req-0a1b2c3d:2", "vllmpeer-req-0a1b2c3d:2"}, notifs)
	peer.wait(t)
}

// A gonixl prefill of TP 2 in this process and the peer as a separate
// process, a vLLM decode of TP 1, over UCX: the peer handshakes over the
// ZMQ side channel, READs from both prefill ranks and verifies every byte;
// both prefill ranks free the request on the peer's completions.
func TestProcessGonixlPrefillPeerDecode(t *testing.T) {
	bin := buildPeer(t)
	newAgent := nativeAgent(t)
	text, toks := prompt(70)
	pre := newGonixlOn(t, newAgent, "prefill", 2, true)
	pblocks := blocksFrom(3, 5)
	pre.fill(t, toks, pblocks)
	raw, err := json.Marshal(pre.finish(t, "req-1", pblocks))
	require.NoError(t, err)
	peer := startPeer(t, bin, "-role", "pull-decode", "-engine-id", "peer-decode", "-prompt", text, "-blocks", "20,21,22,23,24", "-params", string(raw))
	done := peer.next(t, "done")
	assert.Equal(t, float64(0), done["bad_bytes"])
	assert.Equal(t, float64(testModel.RankBytes(1)/testModel.NumBlocks*5), done["ok_bytes"])
	peer.wait(t)
	pre.freed(t, "req-1")
}

// paramsFromJSON parses kv_transfer_params as a vLLM decode does.
func paramsFromJSON(t *testing.T, raw []byte) vllmpeer.Params {
	t.Helper()
	p, err := vllmpeer.ParseParams(raw)
	require.NoError(t, err, "%s", raw)
	return p
}

// Push over UCX with the prefill as a separate process: the peer program
// as a vLLM push prefill of TP 1, a peer push decode of TP 2 in this
// process. Decode's notif-only handshake and PUSH_REG, prefill's full
// handshake back and its WRITE of each decode rank's slice; every byte
// verified.
func TestProcessPushPeerToPeer(t *testing.T) {
	bin := buildPeer(t)
	newAgent := nativeAgent(t)
	text, toks := prompt(70)
	pre := startPeer(t, bin, "-role", "push-prefill", "-engine-id", "peer-prefill", "-prompt", text, "-blocks", "3,4,5,6,7")
	ready := pre.next(t, "ready")
	pre.next(t, "params")
	dec, err := vllmpeer.New(vllmpeer.Config{EngineID: "decode", Model: testModel, TPSize: 2, Mode: vllmpeer.ModePush, VLLMVersion: vllmVersion, NewAgent: newAgent})
	require.NoError(t, err)
	defer dec.Close()
	dblocks := blocksFrom(20, 5)
	// The program's request id is "vllmpeer-req-0a1b2c3d"; decode's own
	// suffix differs, as behind vLLM's proxy.
	info := vllmpeer.PrefillInfo{EngineID: "peer-prefill", Host: ready["host"].(string), Port: int(ready["port"].(float64)), TPSize: 1}
	require.NoError(t, dec.PushRegister(context.Background(), "vllmpeer-req-ffff0000", info, dblocks))
	require.NoError(t, dec.WaitPushed("vllmpeer-req-ffff0000", 30*time.Second))
	c := dec.Verify(toks, dblocks)
	require.Zero(t, c.BadBytes, c.First)
	done := pre.next(t, "done")
	assert.Equal(t, []any{"vllmpeer-req-0a1b2c3d"}, done["report"].(map[string]any)["Written"])
	pre.wait(t)
}
