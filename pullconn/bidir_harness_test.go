package pullconn

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// bidirOpts configures a bidirCluster.
type bidirOpts struct {
	prefill, decode side
	fabric          []loopback.FabricOption
	// threshold is the readers' recompute threshold (0: the default).
	threshold int
	// clock, when set, runs both engines (and all their roles);
	// prefillClock and decodeClock, when set, run one engine each.
	clock, prefillClock, decodeClock connector.Clock
	// exporterCfg and readerCfg adjust the D->P roles' configurations.
	exporterCfg, readerCfg func(*Config)
	// producerCfg and consumerCfg adjust the P->D roles' configurations.
	producerCfg, consumerCfg func(*Config)
}

// bidirCluster is a prefill and a decode engine with both directions on
// every TP rank: prefill has a Producer (agent "prefill-r") and a
// HistoryReader ("prefill-r-hist") over one KV buffer; decode a Consumer
// ("decode-r") and a HistoryExporter ("decode-r-hist") over another.
type bidirCluster struct {
	t         *testing.T
	fab       *loopback.Fabric
	pe, de    *connector.Engine
	prods     []*Producer
	readers   []*HistoryReader
	cons      []*Consumer
	exporters []*HistoryExporter
	agents    []nixl.Agent
	pbufs     []*nixl.Buffer
	dbufs     []*nixl.Buffer
	playouts  []descriptors.Layout
	dlayouts  []descriptors.Layout
	// pclk and dclk are the engines' clocks; lateRanks counts ranks that
	// finished or exported a request after the first rank's hold of it
	// had ended (a stalled caller): they hold it under Params of their own.
	pclk, dclk connector.Clock
	lateRanks  int
}

func newBidirCluster(t *testing.T, o bidirOpts) *bidirCluster {
	t.Helper()
	if o.prefill.tp == 0 {
		o.prefill = side{1, 16}
	}
	if o.decode.tp == 0 {
		o.decode = side{1, 16}
	}
	fab, err := loopback.NewFabric(o.fabric...)
	require.NoError(t, err)
	c := &bidirCluster{t: t, fab: fab}
	t.Cleanup(c.close)
	agent := func(name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		c.agents = append(c.agents, a)
		return a
	}
	pclk, dclk := o.clock, o.clock
	if o.prefillClock != nil {
		pclk = o.prefillClock
	}
	if o.decodeClock != nil {
		dclk = o.decodeClock
	}
	c.pclk, c.dclk = pclk, dclk
	c.pe, err = NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: testGeometry(o.prefill.tp, o.prefill.bs), HandshakeTimeout: 2 * time.Second, Clock: pclk})
	require.NoError(t, err)
	c.de, err = NewEngine(connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: testGeometry(o.decode.tp, o.decode.bs), HandshakeTimeout: 2 * time.Second, Clock: dclk})
	require.NoError(t, err)
	rank := func(l descriptors.Layout, a nixl.Agent, clk connector.Clock, adjust func(*Config)) Config {
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1, Clock: clk}}
		if adjust != nil {
			adjust(&cfg)
		}
		return cfg
	}
	for r := 0; r < o.prefill.tp; r++ {
		buf, err := nixl.AllocBuffer(layoutBytes(o.prefill.tp, o.prefill.bs))
		require.NoError(t, err)
		l := newLayout(buf, r, o.prefill.tp, o.prefill.bs)
		c.pbufs, c.playouts = append(c.pbufs, buf), append(c.playouts, l)
		p, err := NewProducer(c.pe, rank(l, agent(fmt.Sprintf("prefill-%d", r)), pclk, o.producerCfg))
		require.NoError(t, err)
		c.prods = append(c.prods, p)
		hr, err := NewHistoryReader(c.pe, rank(l, agent(fmt.Sprintf("prefill-%d-hist", r)), pclk, o.readerCfg), o.threshold)
		require.NoError(t, err)
		c.readers = append(c.readers, hr)
	}
	for r := 0; r < o.decode.tp; r++ {
		buf, err := nixl.AllocBuffer(layoutBytes(o.decode.tp, o.decode.bs))
		require.NoError(t, err)
		l := newLayout(buf, r, o.decode.tp, o.decode.bs)
		c.dbufs, c.dlayouts = append(c.dbufs, buf), append(c.dlayouts, l)
		cn, err := NewConsumer(c.de, rank(l, agent(fmt.Sprintf("decode-%d", r)), dclk, o.consumerCfg))
		require.NoError(t, err)
		c.cons = append(c.cons, cn)
		ex, err := NewHistoryExporter(c.de, rank(l, agent(fmt.Sprintf("decode-%d-hist", r)), dclk, o.exporterCfg))
		require.NoError(t, err)
		c.exporters = append(c.exporters, ex)
	}
	return c
}

func (c *bidirCluster) close() {
	for _, p := range c.prods {
		p.Close()
	}
	for _, r := range c.readers {
		r.Close()
	}
	for _, cn := range c.cons {
		cn.Close()
	}
	for _, ex := range c.exporters {
		ex.Close()
	}
	for _, e := range []*connector.Engine{c.pe, c.de} {
		if e != nil {
			e.Close()
		}
	}
	for _, a := range c.agents {
		a.Close()
	}
	for _, b := range append(c.pbufs, c.dbufs...) {
		b.Free()
	}
	c.fab.Close()
}

// write computes tokens [from, to) of conversation seed into blocks (which
// hold the conversation from token 0) on every rank of one engine: what
// the engine's forward pass would leave in its KV cache.
func write(bufs []*nixl.Buffer, ls []descriptors.Layout, seed int, blocks []int, from, to int) {
	for r, l := range ls {
		for g := 0; g < l.NumRegions(); g++ {
			for h := 0; h < l.KVHeads; h++ {
				for t := from; t < to; t++ {
					dst := tokenBytes(bufs[r], &l, blocks, 0, g, h, t)
					for i := range dst {
						dst[i] = value(seed, g, l.FirstHead()+h, t, i)
					}
				}
			}
		}
	}
}

// check reports the first byte of tokens [from, to) of conversation seed
// that blocks do not hold on some rank of one engine.
func check(bufs []*nixl.Buffer, ls []descriptors.Layout, seed int, blocks []int, from, to int) error {
	for r, l := range ls {
		for g := 0; g < l.NumRegions(); g++ {
			for h := 0; h < l.KVHeads; h++ {
				for t := from; t < to; t++ {
					got := tokenBytes(bufs[r], &l, blocks, 0, g, h, t)
					for i := range got {
						if want := value(seed, g, l.FirstHead()+h, t, i); got[i] != want {
							return fmt.Errorf("rank %d region %d head %d token %d byte %d: got %#x, want %#x", r, g, l.FirstHead()+h, t, i, got[i], want)
						}
					}
				}
			}
		}
	}
	return nil
}

// finishTurn ends a turn's prefill on every prefill rank (P->D hold).
func (c *bidirCluster) finishTurn(id string, blocks []int) Params {
	c.t.Helper()
	var first Params
	for i, p := range c.prods {
		params, err := p.RequestFinished(id, blocks)
		require.NoError(c.t, err)
		if i == 0 {
			first = params
		}
		c.sameParams(c.pclk, first, params, "prefill rank %d", i)
	}
	return first
}

// sameParams requires a later rank's Params to be the first rank's, unless
// the first rank's hold had ended by the later rank's call (the caller
// stalled past the lease between them, as a loaded test machine does):
// that rank then holds the request under a deadline and nonce of its own,
// which the first rank's Params do not name, so a load of them fails on
// that rank, safely (pullEngine.advert).
func (c *bidirCluster) sameParams(clk connector.Clock, first, p Params, msg string, args ...any) {
	c.t.Helper()
	now := time.Now()
	if clk != nil {
		now = clk.Now()
	}
	if exp, ok := first.expiry(); ok && !reflect.DeepEqual(first, p) && !now.Before(exp) {
		c.lateRanks++
		return
	}
	require.Equal(c.t, first, p, append([]any{msg}, args...)...)
}

// export holds a finished turn on every decode rank (D->P hold).
func (c *bidirCluster) export(id string, blocks []int, tokens int) Params {
	c.t.Helper()
	var first Params
	for i, ex := range c.exporters {
		params, err := ex.ExportTurn(id, blocks, tokens)
		require.NoError(c.t, err)
		if i == 0 {
			first = params
		}
		c.sameParams(c.dclk, first, params, "decode rank %d", i)
	}
	return first
}

// loadHistory starts reading history on every prefill rank and returns
// whether they read (they all answer alike).
func (c *bidirCluster) loadHistory(id string, p Params, local []int) bool {
	c.t.Helper()
	var read bool
	for i, hr := range c.readers {
		r, err := hr.LoadHistory(id, p, local)
		require.NoError(c.t, err)
		if i == 0 {
			read = r
		}
		require.Equal(c.t, read, r)
	}
	return read
}

// drained is something that ends requests: a Consumer or HistoryReader.
type drained interface{ Drain() []connector.Result }

// endOf waits for request id's one result on every rank of rs, failing on
// a second result or any other id.
func endOf[T drained](t *testing.T, rs []T, id string) []connector.Result {
	t.Helper()
	out := make([]connector.Result, len(rs))
	got := make([]bool, len(rs))
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; n < len(rs); {
		for i, r := range rs {
			for _, res := range r.Drain() {
				require.Equal(t, id, res.RequestID, "rank %d", i)
				require.False(t, got[i], "rank %d: second result for %q", i, id)
				got[i], out[i] = true, res
				n++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q's end", id)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return out
}

// freedBy waits until every holder (Producer or HistoryExporter) has freed
// id once, failing on a second release or another id.
func freedBy[T interface{ DrainFreed() []string }](t *testing.T, hs []T, id string) {
	t.Helper()
	got := make([]bool, len(hs))
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; n < len(hs); {
		for i, h := range hs {
			for _, f := range h.DrainFreed() {
				require.Equal(t, id, f, "holder %d", i)
				require.False(t, got[i], "holder %d freed %q twice", i, id)
				got[i] = true
				n++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q to be freed", id)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
