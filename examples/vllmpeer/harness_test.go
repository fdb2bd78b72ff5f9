package vllmpeer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
)

const vllmVersion = "0.27.1"

// testModel is small: 2 layers, 4 KV heads of 4 bfloat16 elements (8 bytes
// of K and 8 of V per head and token), 16-token blocks.
var testModel = vllmpeer.Model{Name: "Qwen/Qwen3-0.6B", DType: "bfloat16", ElemBytes: 2, Layers: 2, KVHeads: 4, HeadDim: 4, BlockSize: 16, NumBlocks: 64}

func newFabric(t *testing.T) *loopback.Fabric {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	t.Cleanup(func() { fab.Close() })
	return fab
}

func newPeer(t *testing.T, fab *loopback.Fabric, id string, tp int, mode string, edit ...func(*vllmpeer.Config)) *vllmpeer.Peer {
	t.Helper()
	cfg := vllmpeer.Config{EngineID: id, Model: testModel, TPSize: tp, Mode: mode, VLLMVersion: vllmVersion,
		NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }, HandshakeTimeout: 2 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	p, err := vllmpeer.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// gonixl is a gonixl pull engine in vLLM's protocol: one Producer or
// Consumer per TP rank, each with its KV memory.
type gonixl struct {
	e     *connector.Engine
	prods []*pullconn.Producer
	cons  []*pullconn.Consumer
	bufs  []*nixl.Buffer
	tp    int
}

func geometry(m vllmpeer.Model, tp int) descriptors.Geometry {
	return descriptors.Geometry{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, DType: m.DType, BlockSize: m.BlockSize,
		Blocks: m.NumBlocks, TPSize: tp, KVPacked: true}
}

func newGonixl(t *testing.T, fab *loopback.Fabric, id string, tp int, prefill bool, edit ...func(*connector.EngineConfig)) *gonixl {
	t.Helper()
	return newGonixlOn(t, func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }, id, tp, prefill, edit...)
}

// newGonixlOn is newGonixl on the agents newAgent makes.
func newGonixlOn(t *testing.T, newAgent func(string) (nixl.Agent, error), id string, tp int, prefill bool, edit ...func(*connector.EngineConfig)) *gonixl {
	t.Helper()
	g := geometry(testModel, tp)
	ec := connector.EngineConfig{EngineID: id, Model: testModel.Name, Geometry: g, Protocol: connector.ProtocolVLLM,
		VLLM: connector.VLLM{Version: vllmVersion, AttentionBackend: vllmpeer.DefaultAttnBackend, ConnectorVersion: vllmpeer.ConnectorVersion}, HandshakeTimeout: 2 * time.Second}
	for _, e := range edit {
		e(&ec)
	}
	e, err := pullconn.NewEngine(ec)
	require.NoError(t, err)
	out := &gonixl{e: e, tp: tp}
	var agents []nixl.Agent
	t.Cleanup(func() {
		for _, p := range out.prods {
			p.Close()
		}
		for _, c := range out.cons {
			c.Close()
		}
		e.Close()
		for _, a := range agents {
			a.Close()
		}
		for _, b := range out.bufs {
			b.Free()
		}
	})
	for r := range tp {
		a, err := newAgent(fmt.Sprintf("%s-%d", id, r))
		require.NoError(t, err)
		agents = append(agents, a)
		buf, err := nixl.AllocBuffer(int(g.RankBytes()))
		require.NoError(t, err)
		out.bufs = append(out.bufs, buf)
		l, err := g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
		require.NoError(t, err)
		cfg := pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}}
		if prefill {
			p, err := pullconn.NewProducer(e, cfg)
			require.NoError(t, err)
			out.prods = append(out.prods, p)
		} else {
			c, err := pullconn.NewConsumer(e, cfg)
			require.NoError(t, err)
			out.cons = append(out.cons, c)
		}
	}
	return out
}

// fill writes the prompt's KV into every rank's blocks.
func (g *gonixl) fill(t *testing.T, tokens, blocks []int) {
	for r, b := range g.bufs {
		require.NoError(t, vllmpeer.FillKV(b.Bytes(), testModel, g.tp, r, tokens, blocks))
	}
}

// verify checks every rank's blocks, every byte.
func (g *gonixl) verify(t *testing.T, tokens, blocks []int) uint64 {
	t.Helper()
	var ok uint64
	for r, b := range g.bufs {
		c, err := vllmpeer.CheckKV(b.Bytes(), testModel, g.tp, r, tokens, blocks)
		require.NoError(t, err)
		require.Zero(t, c.BadBytes, "rank %d: %s", r, c.First)
		ok += c.OKBytes
	}
	return ok
}

// finish calls RequestFinished on every rank; all must agree.
func (g *gonixl) finish(t *testing.T, id string, blocks []int) pullconn.Params {
	t.Helper()
	var first pullconn.Params
	for i, p := range g.prods {
		ps, err := p.RequestFinished(id, blocks)
		require.NoError(t, err)
		if i == 0 {
			first = ps
		} else {
			require.Equal(t, first, ps)
		}
	}
	return first
}

// results waits for id's result on every decode rank.
func (g *gonixl) results(t *testing.T, id string) []connector.Result {
	t.Helper()
	drains := make([]func() []connector.Result, len(g.cons))
	for i, c := range g.cons {
		drains[i] = c.Drain
	}
	return awaitResults(t, id, 20*time.Second, drains)
}

// freed waits until every prefill rank freed id.
func (g *gonixl) freed(t *testing.T, id string) {
	t.Helper()
	drains := make([]func() []string, len(g.prods))
	for i, p := range g.prods {
		drains[i] = p.DrainFreed
	}
	awaitFreed(t, id, 20*time.Second, drains)
}

// awaitResults waits, at most bound (which only bounds a hang), for id's
// one result from each of drains (a decode rank's Drain each).
func awaitResults(t *testing.T, id string, bound time.Duration, drains []func() []connector.Result) []connector.Result {
	t.Helper()
	out := make([]*connector.Result, len(drains))
	deadline := time.Now().Add(bound)
	for {
		all := true
		for i, d := range drains {
			for _, r := range d() {
				require.Equal(t, id, r.RequestID, "rank %d", i)
				require.Nil(t, out[i], "rank %d: a second result", i)
				out[i] = &r
			}
			all = all && out[i] != nil
		}
		if all {
			rs := make([]connector.Result, len(out))
			for i, r := range out {
				rs[i] = *r
			}
			return rs
		}
		require.True(t, time.Now().Before(deadline), "no result for %s on every rank", id)
		time.Sleep(200 * time.Microsecond)
	}
}

// awaitFreed waits, at most bound, until each of drains (a prefill rank's
// DrainFreed each) freed id, once.
func awaitFreed(t *testing.T, id string, bound time.Duration, drains []func() []string) {
	t.Helper()
	got := make([]bool, len(drains))
	deadline := time.Now().Add(bound)
	for {
		all := true
		for i, d := range drains {
			for _, f := range d() {
				require.Equal(t, id, f, "prefill rank %d", i)
				require.False(t, got[i], "prefill rank %d freed %s twice", i, id)
				got[i] = true
			}
			all = all && got[i]
		}
		if all {
			return
		}
		require.True(t, time.Now().Before(deadline), "prefill ranks freed %v of %s", got, id)
		time.Sleep(200 * time.Microsecond)
	}
}

// pullconnParams turns the peer's kv_transfer_params into gonixl's Params
// the way a proxy hands them over: vLLM's exact JSON (remote_block_ids a
// list per KV-cache group), decoded by gonixl's Params.
func pullconnParams(t *testing.T, p vllmpeer.Params) pullconn.Params {
	t.Helper()
	var out pullconn.Params
	require.NoError(t, json.Unmarshal(p.JSON(), &out))
	return out
}

// completions returns rank r's notifications that are not heartbeats.
func completions(rep vllmpeer.Report, r int) []string {
	var out []string
	for _, n := range rep.Notifs[r] {
		if !strings.HasPrefix(n, "HB:") {
			out = append(out, n)
		}
	}
	return out
}

func blocksFrom(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// prompt is a prompt of n words and its tokens.
func prompt(n int) (string, []int) {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i*7%13)
	}
	s := strings.Join(words, " ")
	return s, vllmpeer.Tokenize(s)
}

// awaitPushRegs waits, at most bound, until the prefill peer has read n
// PUSH_REGs, and returns its report then. A prefill rank writes on the first
// registration it reads; the others (one per further decode rank) may still
// be on their way when the write is done, so a report taken at that moment
// can hold fewer.
func awaitPushRegs(t *testing.T, pre *vllmpeer.Peer, n int, bound time.Duration) vllmpeer.Report {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		rep := pre.Report()
		if len(rep.PushRegs) >= n {
			return rep
		}
		require.True(t, time.Now().Before(deadline), "the prefill peer read %d PUSH_REGs of %d", len(rep.PushRegs), n)
		time.Sleep(200 * time.Microsecond)
	}
}
