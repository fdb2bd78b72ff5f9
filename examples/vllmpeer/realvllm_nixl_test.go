//go:build nixl

package vllmpeer_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/oracle"
	"github.com/gonixl/gonixl/internal/portpick"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// gonixl against vLLM's own NIXL connector: testdata/vllm/worker.py runs
// vLLM 0.34.0's NixlConnector or NixlPushConnector (scheduler and worker
// side, its side channel, its NIXL agent) on CPU tensors in a process of
// its own, and a gonixl engine in this process pairs with it over NIXL's
// UCX backend on 127.0.0.1. Every byte is checked against the worker's
// pattern on the side that receives it.

// The model both sides hold: worker.py's defaults (CPU_ATTN wants block
// sizes that are multiples of 32).
var vllmModel = descriptors.Geometry{Layers: 2, KVHeads: 2, HeadDim: 64, DType: "bfloat16", BlockSize: 32, Blocks: 64, KVPacked: true}

const requestsInARow = 5

// vllmProc is worker.py running one side of the pair.
type vllmProc struct {
	events chan map[string]any
	stdin  io.WriteCloser
	log    *strings.Builder
	ready  map[string]any
	port   int
}

// startVLLM starts vLLM's connector as mode ("prefill" or "decode") with
// connector ("pull" or "push"); it returns once vLLM's side channel listens.
// A side-channel port taken between the pick and vLLM's bind (worker.py
// reports "port_in_use" and exits) is picked again.
func startVLLM(t *testing.T, mode, conn, engineID string) *vllmProc {
	t.Helper()
	if os.Getenv("GONIXL_VLLM_PAIR") != "1" {
		// NIXL's wheels bundle UCX 1.23 (1.5.1) or 1.22 (1.4.1), whose wire
		// UCX 1.13 (Debian's, which a NIXL built here links by default)
		// cannot speak: a 1.13 agent loading a newer one's metadata aborts
		// the process in UCX. docs/vllm.md, "Pairing with vLLM's own
		// connector", says how to run these.
		t.Skip("pairing with vLLM's own connector needs this NIXL on a UCX the wheel's UCX speaks (1.22 or newer first on LD_LIBRARY_PATH); set GONIXL_VLLM_PAIR=1 once it is")
	}
	const tries = 5
	for try := 1; ; try++ {
		port, err := portpick.Pick()
		require.NoError(t, err)
		p, ready := launchVLLM(t, mode, conn, engineID, port)
		if ready["event"] == "ready" {
			p.ready = ready
			return p
		}
		require.Equal(t, true, ready["port_in_use"], "vLLM %s (%s) failed to start: %v", mode, conn, ready)
		require.Less(t, try, tries, "vLLM's side-channel port was taken %d times in a row: %v", tries, ready)
		t.Logf("vLLM %s (%s): side-channel port %d was taken before vLLM bound it; picking another", mode, conn, p.port)
	}
}

// launchVLLM starts worker.py with its side channel on port and returns
// its first "ready" or "failed" event.
func launchVLLM(t *testing.T, mode, conn, engineID string, port int) (*vllmProc, map[string]any) {
	t.Helper()
	py := oracle.Python(t)
	script := filepath.Join(filepath.Dir(oracle.Script()), "worker.py")
	g := vllmModel
	cmd := exec.Command(py, script, mode, "--connector", conn, "--port", strconv.Itoa(port), "--engine-id", engineID,
		"--layers", strconv.Itoa(g.Layers), "--kv-heads", strconv.Itoa(g.KVHeads), "--head-size", strconv.Itoa(g.HeadDim),
		"--block-size", strconv.Itoa(g.BlockSize), "--num-blocks", strconv.Itoa(g.Blocks), "--dtype", g.DType, "--timeout", "120")
	cmd.Env = append(os.Environ(), ucxEnv...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &vllmProc{events: make(chan map[string]any, 64), stdin: stdin, log: &strings.Builder{}, port: port}
	cmd.Stderr = p.log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.events <- m
			}
		}
		close(p.events)
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_, _ = io.WriteString(stdin, `{"stop": true}`+"\n")
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("vLLM %s (%s) stderr, last part:\n%s", mode, conn, lastPart(p.log.String(), 6000))
		}
	})
	return p, p.nextAny(t, "ready", "failed")
}

// next waits for the next event named name; "error" and "failed" events
// fail the test. Starting vLLM takes long on a busy machine: the deadline
// only bounds a hang.
func (p *vllmProc) next(t *testing.T, name string) map[string]any {
	t.Helper()
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case m, ok := <-p.events:
			require.True(t, ok, "vLLM exited before %q; stderr:\n%s", name, lastPart(p.log.String(), 6000))
			if m["event"] == name {
				return m
			}
			require.NotContains(t, []any{"error", "failed"}, m["event"], "vLLM: %v", m)
		case <-deadline:
			t.Fatalf("no %q event from vLLM", name)
		}
	}
}

// nextAny waits for the next event of any of names, failing on "error".
func (p *vllmProc) nextAny(t *testing.T, names ...string) map[string]any {
	t.Helper()
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case m, ok := <-p.events:
			require.True(t, ok, "vLLM exited; stderr:\n%s", lastPart(p.log.String(), 6000))
			for _, n := range names {
				if m["event"] == n {
					return m
				}
			}
			require.NotEqual(t, "error", m["event"], "vLLM: %v", m)
		case <-deadline:
			t.Fatalf("no %v event from vLLM", names)
		}
	}
}

func (p *vllmProc) send(t *testing.T, cmd map[string]any) {
	t.Helper()
	b, err := json.Marshal(cmd)
	require.NoError(t, err)
	_, err = p.stdin.Write(append(b, '\n'))
	require.NoError(t, err)
}

func lastPart(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// vllmPattern is byte k of layer's page of a request's index-th block, as
// worker.py fills and checks it (its docstring).
func vllmPattern(seed, layer, index, k uint32) byte {
	x := seed*0x9E3779B1 + layer*0x85EBCA6B + index*0xC2B2AE35 + k*0x27D4EB2F
	x ^= x >> 15
	x *= 0x2C1B3C6D
	x ^= x >> 12
	return byte(x >> 24)
}

// rankPages is what a gonixl rank holds of vLLM's pages: rank r of tp
// holds, in each of its blocks, the r-th tp-th of vLLM's page (its KV
// heads: vLLM's pages are head-major, LBHNC).
type rankPages struct {
	buf  *nixl.Buffer
	l    descriptors.Layout
	r    int
	tp   int
	page int // vLLM's page: a block of one layer, every head
}

func (rp rankPages) bytes(layer, block int) []byte {
	bl := int(rp.l.BlockLenOf(layer))
	off := int(rp.l.Regions[layer].Base-rp.buf.RegDesc().Desc.Addr) + block*bl
	return rp.buf.Bytes()[off : off+bl]
}

func (rp rankPages) fill(seed int, blocks []int) {
	for layer := range rp.l.Regions {
		for i, b := range blocks {
			dst := rp.bytes(layer, b)
			first := rp.r * rp.page / rp.tp
			for k := range dst {
				dst[k] = vllmPattern(uint32(seed), uint32(layer), uint32(i), uint32(first+k))
			}
		}
	}
}

// check counts the bytes that differ from the pattern, and the bytes.
func (rp rankPages) check(seed int, blocks []int) (bad, total int) {
	for layer := range rp.l.Regions {
		for i, b := range blocks {
			got := rp.bytes(layer, b)
			first := rp.r * rp.page / rp.tp
			for k := range got {
				if got[k] != vllmPattern(uint32(seed), uint32(layer), uint32(i), uint32(first+k)) {
					bad++
				}
			}
			total += len(got)
		}
	}
	return bad, total
}

// loadCounter counts the peer metadata an agent loads: one handshake with
// a prefill rank loads it once.
type loadCounter struct {
	nixl.Agent
	n *atomic.Int64
}

func (a loadCounter) LoadRemoteMD(md []byte) (string, error) {
	a.n.Add(1)
	return a.Agent.LoadRemoteMD(md)
}

// side is a gonixl engine of tp ranks in vLLM's protocol, pull or push,
// prefill or decode, on native NIXL agents, that pairs with the vLLM
// process whose ready event is ready.
type side struct {
	e       *connector.Engine
	pages   []rankPages
	pullP   []*pullconn.Producer
	pullC   []*pullconn.Consumer
	pushP   []*pushconn.Producer
	pushC   []*pushconn.Consumer
	mdLoads atomic.Int64
}

func newSide(t *testing.T, conn string, prefill bool, tp int, ready map[string]any, edit func(*connector.EngineConfig)) *side {
	t.Helper()
	newAgent := nativeAgent(t)
	g := vllmModel
	g.TPSize = tp
	ec := connector.EngineConfig{EngineID: fmt.Sprintf("gonixl-%s-%t-%d", conn, prefill, tp), Model: ready["model"].(string), Geometry: g,
		Protocol: connector.ProtocolVLLM, VLLM: connector.VLLM{Version: "0.34.0", AttentionBackend: ready["attn_backend"].(string)},
		ListenAddr: "127.0.0.1:0", HandshakeTimeout: 30 * time.Second}
	if edit != nil {
		edit(&ec)
	}
	s := &side{}
	var err error
	if conn == "push" {
		s.e, err = pushconn.NewEngine(ec)
	} else {
		s.e, err = pullconn.NewEngine(ec)
	}
	require.NoError(t, err)
	var agents []nixl.Agent
	var bufs []*nixl.Buffer
	t.Cleanup(func() {
		for _, p := range s.pullP {
			p.Close()
		}
		for _, c := range s.pullC {
			c.Close()
		}
		for _, p := range s.pushP {
			p.Close()
		}
		for _, c := range s.pushC {
			c.Close()
		}
		s.e.Close()
		for _, a := range agents {
			a.Close()
		}
		for _, b := range bufs {
			b.Free()
		}
	})
	page := int(ready["block_lens"].([]any)[0].(float64))
	for r := range tp {
		a, err := newAgent(fmt.Sprintf("%s-%d", ec.EngineID, r))
		require.NoError(t, err)
		agents = append(agents, a)
		buf, err := nixl.AllocBuffer(int(g.RankBytes()))
		require.NoError(t, err)
		bufs = append(bufs, buf)
		l, err := g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
		require.NoError(t, err)
		require.Equal(t, uint64(page/tp), l.BlockLenOf(0), "a rank's block is its share of vLLM's page")
		s.pages = append(s.pages, rankPages{buf: buf, l: l, r: r, tp: tp, page: page})
		rc := connector.RankConfig{Agent: loadCounter{Agent: a, n: &s.mdLoads}, Layout: l, StatsInterval: -1}
		switch {
		case conn == "pull" && prefill:
			p, err := pullconn.NewProducer(s.e, pullconn.Config{RankConfig: rc})
			require.NoError(t, err)
			s.pullP = append(s.pullP, p)
		case conn == "pull":
			c, err := pullconn.NewConsumer(s.e, pullconn.Config{RankConfig: rc})
			require.NoError(t, err)
			s.pullC = append(s.pullC, c)
		case prefill:
			p, err := pushconn.NewProducer(s.e, pushconn.Config{RankConfig: rc})
			require.NoError(t, err)
			s.pushP = append(s.pushP, p)
		default:
			c, err := pushconn.NewConsumer(s.e, pushconn.Config{RankConfig: rc})
			require.NoError(t, err)
			s.pushC = append(s.pushC, c)
		}
	}
	return s
}

// results waits for id's result on every decode rank (the bound only
// bounds a hang).
func (s *side) results(t *testing.T, id string) []connector.Result {
	t.Helper()
	var drains []func() []connector.Result
	for _, c := range s.pullC {
		drains = append(drains, c.Drain)
	}
	for _, c := range s.pushC {
		drains = append(drains, c.Drain)
	}
	return awaitResults(t, id, 2*time.Minute, drains)
}

// freed waits until every prefill rank freed id.
func (s *side) freed(t *testing.T, id string) {
	t.Helper()
	var drains []func() []string
	for _, p := range s.pullP {
		drains = append(drains, p.DrainFreed)
	}
	for _, p := range s.pushP {
		drains = append(drains, p.DrainFreed)
	}
	awaitFreed(t, id, 2*time.Minute, drains)
}

func (s *side) verify(t *testing.T, seed int, blocks []int) {
	t.Helper()
	for r, rp := range s.pages {
		bad, total := rp.check(seed, blocks)
		require.NotZero(t, total)
		require.Zero(t, bad, "decode rank %d: %d of %d bytes differ from vLLM's", r, bad, total)
	}
}

func ints(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// vLLM's prefill, gonixl's decode: five requests in a row, each prefilled
// by vLLM's connector into its own blocks and loaded (pull) or written
// (push) into gonixl's ranks, every byte checked there; one handshake
// for all five; vLLM frees each request's blocks.
func TestVLLMPrefillGonixlDecode(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		for _, tp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/tp1-to-tp%d", conn, tp), func(t *testing.T) {
				v := startVLLM(t, "prefill", conn, "vllm-prefill")
				dec := newSide(t, conn, false, tp, v.ready, nil)
				for n := range requestsInARow {
					seed, pblocks, dblocks := 100+n, ints(1+3*n, 3), ints(60-3*n-2, 3)
					base := fmt.Sprintf("req-%d", n)
					v.send(t, map[string]any{"request_id": base + "-0000aaaa", "blocks": pblocks, "num_tokens": 96, "seed": seed})
					params := v.next(t, "params")
					raw, err := json.Marshal(params["kv_transfer_params"])
					require.NoError(t, err)
					if conn == "pull" {
						var p pullconn.Params
						require.NoError(t, json.Unmarshal(raw, &p))
						for _, c := range dec.pullC {
							require.NoError(t, c.Load(base+"-0000bbbb", p, dblocks))
						}
					} else {
						var kv struct {
							EngineID string `json:"remote_engine_id"`
							Host     string `json:"remote_host"`
							Port     int    `json:"remote_port"`
							TP       int    `json:"tp_size"`
						}
						require.NoError(t, json.Unmarshal(raw, &kv))
						pf := pushconn.Prefill{EngineID: kv.EngineID, Host: kv.Host, Port: kv.Port, TPSize: kv.TP, PPSize: 1}
						for _, c := range dec.pushC {
							require.NoError(t, c.Register(base+"-0000bbbb", pf, dblocks))
						}
					}
					for r, res := range dec.results(t, base+"-0000bbbb") {
						require.NoError(t, res.Err, "request %d, decode rank %d", n, r)
					}
					dec.verify(t, seed, dblocks)
					freed := v.next(t, "freed")
					assert.Equal(t, base+"-0000aaaa", freed["request_id"])
				}
				assert.Equal(t, int64(tp), dec.mdLoads.Load(), "one handshake for %d requests: each decode rank loaded vLLM's metadata once", requestsInARow)
			})
		}
	}
}

// gonixl's prefill, vLLM's decode: five requests in a row, each filled on
// gonixl's ranks and read (pull) or received (push) by vLLM's connector,
// which checks every byte against the pattern and handshakes once; every
// gonixl prefill rank frees each request.
func TestGonixlPrefillVLLMDecode(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		for _, tp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/tp%d-to-tp1", conn, tp), func(t *testing.T) {
				v := startVLLM(t, "decode", conn, "vllm-decode")
				pre := newSide(t, conn, true, tp, v.ready, nil)
				for n := range requestsInARow {
					seed, pblocks, dblocks := 200+n, ints(1+3*n, 3), ints(60-3*n-2, 3)
					base := fmt.Sprintf("req-%d", n)
					for _, rp := range pre.pages {
						rp.fill(seed, pblocks)
					}
					var kv any
					if conn == "pull" {
						var first pullconn.Params
						for i, p := range pre.pullP {
							ps, err := p.RequestFinished(base+"-0000aaaa", pblocks)
							require.NoError(t, err)
							if i == 0 {
								first = ps
							}
						}
						kv = first
					} else {
						// The push prefill's Params, as a proxy hands them to
						// decode (vLLM's push decode reads remote_request_id
						// too).
						var first pushconn.Params
						for i, p := range pre.pushP {
							ps, err := p.RequestFinished(base+"-0000aaaa", pblocks)
							require.NoError(t, err)
							if i == 0 {
								first = ps
							}
						}
						kv = first
					}
					v.send(t, map[string]any{"request_id": base + "-0000bbbb", "blocks": dblocks, "num_tokens": 96, "seed": seed, "kv_transfer_params": kv})
					got := v.next(t, "received")
					assert.Equal(t, true, got["match"], "request %d: vLLM's decode compared every byte: %v", n, got)
					assert.Equal(t, float64(1), got["handshakes"], "request %d: one handshake", n)
					pre.freed(t, base+"-0000aaaa")
				}
			})
		}
	}
}

// A compatibility hash that differs (here the vLLM version each side was
// told) is refused by every side that handshakes: a gonixl decode, pull
// and push, and vLLM's decode, pull and push.
func TestVLLMHashMismatchRefused(t *testing.T) {
	older := func(ec *connector.EngineConfig) { ec.VLLM.Version, ec.VLLM.ConnectorVersion = "0.34.0+other", 16 }
	for _, conn := range []string{"pull", "push"} {
		t.Run(conn+"/gonixl-decode", func(t *testing.T) {
			v := startVLLM(t, "prefill", conn, "vllm-prefill")
			dec := newSide(t, conn, false, 1, v.ready, older)
			v.send(t, map[string]any{"request_id": "req-0-0000aaaa", "blocks": []int{1, 2}, "num_tokens": 64, "seed": 1})
			params := v.next(t, "params")
			raw, _ := json.Marshal(params["kv_transfer_params"])
			var err error
			if conn == "pull" {
				var p pullconn.Params
				require.NoError(t, json.Unmarshal(raw, &p))
				err = dec.pullC[0].Load("req-0-0000bbbb", p, []int{5, 6})
			} else {
				pf := pushconn.Prefill{EngineID: "vllm-prefill", Host: "127.0.0.1", Port: v.port, TPSize: 1, PPSize: 1}
				err = dec.pushC[0].Register("req-0-0000bbbb", pf, []int{5, 6})
			}
			if err == nil {
				err = dec.results(t, "req-0-0000bbbb")[0].Err
			}
			require.ErrorIs(t, err, connector.ErrIncompatible)
			assert.Contains(t, err.Error(), "compatibility hash mismatch")
		})
		t.Run(conn+"/vllm-decode", func(t *testing.T) {
			v := startVLLM(t, "decode", conn, "vllm-decode")
			pre := newSide(t, conn, true, 1, v.ready, older)
			var kv any
			if conn == "pull" {
				p, err := pre.pullP[0].RequestFinished("req-0-0000aaaa", []int{1, 2})
				require.NoError(t, err)
				kv = p
			} else {
				p, err := pre.pushP[0].RequestFinished("req-0-0000aaaa", []int{1, 2})
				require.NoError(t, err)
				kv = p
			}
			v.send(t, map[string]any{"request_id": "req-0-0000bbbb", "blocks": []int{5, 6}, "num_tokens": 64, "seed": 1, "kv_transfer_params": kv})
			got := v.nextAny(t, "failed", "received")
			require.Equal(t, "failed", got["event"], "vLLM's decode must refuse the hash: %v", got)
			assert.Equal(t, false, got["match"])
			// vLLM logs its refusal; the event says only that the request failed.
			assert.Contains(t, v.log.String(), "NIXL compatibility hash mismatch. Local: "+v.ready["compat_hash"].(string), "vLLM's own message")
		})
	}
}

// vLLM's connector waits without a deadline for its handshake listener to
// bind; worker.py turns a bind that fails into a "failed" event with
// port_in_use and an exit, so startVLLM can pick another port (CI once
// waited five minutes on a port taken between the pick and the bind).
func TestVLLMWorkerReportsATakenPort(t *testing.T) {
	if os.Getenv("GONIXL_VLLM_PAIR") != "1" {
		t.Skip("needs GONIXL_VLLM_PAIR=1, as startVLLM")
	}
	port, err := portpick.Pick()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err)
	defer l.Close()
	for _, mode := range []string{"prefill", "decode"} {
		_, ev := launchVLLM(t, mode, "pull", "vllm-"+mode, port)
		require.Equal(t, "failed", ev["event"], "%v", ev)
		require.Equal(t, true, ev["port_in_use"], "%v", ev)
		require.Contains(t, ev["reason"], "Address already in use")
	}
}

// A gonixl push prefill that writes progressively (Producer.Progress: the
// first blocks while the prompt still computes, the rest with the
// completion at RequestFinished) pairs with vLLM's own push decode
// unchanged: vLLM's decode compares every byte of the request and sees one
// completion. The first request of each pairing is plain push, whose
// Params, with the ids changed, the progressive ones reuse (a push decode
// needs only prefill's coordinates and request id before prefill ends).
func TestGonixlProgressivePrefillVLLMDecode(t *testing.T) {
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("push/tp%d-to-tp1", tp), func(t *testing.T) {
			v := startVLLM(t, "decode", "push", "vllm-decode")
			pre := newSide(t, "push", true, tp, v.ready, nil)
			var template pushconn.Params
			for n := range 3 {
				seed, pblocks, dblocks := 300+n, ints(1+3*n, 3), ints(60-3*n-2, 3)
				id := fmt.Sprintf("req-%d-0000aaaa", n)
				for _, rp := range pre.pages {
					rp.fill(seed, pblocks)
				}
				var kv pushconn.Params
				written := make([]uint64, len(pre.pushP))
				if n == 0 {
					for i, p := range pre.pushP {
						ps, err := p.RequestFinished(id, pblocks)
						require.NoError(t, err)
						if i == 0 {
							template = ps
						}
					}
					kv = template
				} else {
					// Two of the three blocks are final before decode asks.
					for i, p := range pre.pushP {
						written[i], _ = p.Stats().Get("progressive_writes")
						require.NoError(t, p.Progress(id, pblocks[:2], 96))
					}
					kv = template
					kv.RemoteRequestID, kv.RemoteBlockIDs = id, pblocks
				}
				v.send(t, map[string]any{"request_id": fmt.Sprintf("req-%d-0000bbbb", n), "blocks": dblocks, "num_tokens": 96, "seed": seed, "kv_transfer_params": kv})
				if n > 0 {
					// Every prefill rank wrote its part into vLLM's blocks
					// on decode's registration; only then does prefill end.
					for i, p := range pre.pushP {
						require.Eventually(t, func() bool {
							w, _ := p.Stats().Get("progressive_writes")
							return w > written[i]
						}, time.Minute, 10*time.Millisecond, "rank %d wrote no progressive part", i)
						_, err := p.RequestFinished(id, pblocks)
						require.NoError(t, err)
					}
				}
				got := v.next(t, "received")
				assert.Equal(t, true, got["match"], "request %d: vLLM's decode compared every byte: %v", n, got)
				pre.freed(t, id)
			}
		})
	}
}
