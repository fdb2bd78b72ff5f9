// Command quickstart moves one request's KV blocks from a prefill engine to
// a decode engine with the pull connector, both in this process on loopback
// agents (no NIXL needed): prefill finishes the request, decode loads it,
// prefill frees it. The README's quick start is this file.
package main

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	_ "github.com/gonixl/gonixl/pullconn" // registers the "pull" connector
	_ "github.com/gonixl/gonixl/pushconn" // registers the "push" connector
)

// The model's KV cache as each engine holds it: 2 layers, 8 KV heads of 64
// bfloat16 elements, 64 blocks of 16 tokens, one TP rank.
var geometry = descriptors.Geometry{Layers: 2, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 64, TPSize: 1}

// rank is one TP rank of an engine: its agent and its KV cache.
type rank struct {
	agent  nixl.Agent
	buf    *nixl.Buffer
	layout descriptors.Layout
}

func newRank(fab *loopback.Fabric, name string) rank {
	agent, err := fab.NewAgent(name)
	check(err)
	buf, err := nixl.AllocBuffer(int(geometry.RankBytes()))
	check(err)
	layout, err := geometry.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	check(err)
	return rank{agent, buf, layout}
}

func main() {
	fab, err := loopback.NewFabric()
	check(err)
	defer fab.Close()
	p, d := newRank(fab, "prefill-0"), newRank(fab, "decode-0")
	defer p.buf.Free()
	defer d.buf.Free()
	defer p.agent.Close()
	defer d.agent.Close()

	// One value picks the connector, as vLLM's kv_connector does: "pull"
	// (NixlConnector) or "push" (NixlPushConnector); the rest is the same.
	const conn = "pull"
	pe, err := connector.NewEngine(connector.EngineConfig{Connector: conn, EngineID: "prefill", Model: "llama", Geometry: geometry})
	check(err)
	defer pe.Close()
	de, err := connector.NewEngine(connector.EngineConfig{Connector: conn, EngineID: "decode", Model: "llama", Geometry: geometry})
	check(err)
	defer de.Close()
	prod, err := pe.NewProducer(connector.RankConfig{Agent: p.agent, Layout: p.layout})
	check(err)
	defer prod.Close()
	cons, err := de.NewConsumer(connector.RankConfig{Agent: d.agent, Layout: d.layout})
	check(err)
	defer cons.Close()

	copy(p.buf.Bytes(), "KV of request 1")
	// Prefill: the request finished in blocks 0 and 1.
	params, err := prod.RequestFinished(connector.Request{ID: "req-1", Blocks: [][]int{{0, 1}}})
	check(err)
	// The proxy passes params (vLLM's kv_transfer_params) to decode, which
	// allocated blocks 5 and 6 for the request.
	check(cons.Load(connector.Request{ID: "req-1", Blocks: [][]int{{5, 6}}, Params: params}))
	// Engine loops: drain without blocking, once per step.
	var freed []string
	deadline := time.Now().Add(10 * time.Second)
	for done := false; (!done || len(freed) == 0) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range cons.Drain() {
			fmt.Printf("decode: %s done, err=%v\n", r.RequestID, r.Err)
			done = true
		}
		freed = append(freed, prod.DrainFreed()...)
	}
	fmt.Printf("prefill: free %v\n", freed)
	off := 5 * p.layout.BlockLen()
	fmt.Printf("decode block 5 starts with %q\n", d.buf.Bytes()[off:off+15])
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
