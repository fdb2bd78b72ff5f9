package pullconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
)

// geometry is the model's KV cache as each engine holds it: 2 layers, 8
// KV heads of 64 bfloat16 elements, 64 blocks of 16 tokens, one TP rank.
var geometry = descriptors.Geometry{Layers: 2, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 64, TPSize: 1}

// kvCache allocates one rank's KV cache and lays the geometry out in it.
func kvCache() (*nixl.Buffer, descriptors.Layout) {
	buf, err := nixl.AllocBuffer(int(geometry.RankBytes()))
	if err != nil {
		panic(err)
	}
	l, err := geometry.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	if err != nil {
		panic(err)
	}
	return buf, l
}

// One prefill engine and one decode engine of one TP rank each, on loopback
// agents: prefill finishes a request, decode loads it, prefill frees it.
func Example() {
	fab, _ := loopback.NewFabric()
	defer fab.Close()
	pa, _ := fab.NewAgent("prefill-0")
	da, _ := fab.NewAgent("decode-0")
	defer pa.Close()
	defer da.Close()
	pbuf, playout := kvCache()
	dbuf, dlayout := kvCache()
	defer pbuf.Free()
	defer dbuf.Free()

	pe, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "llama", Geometry: geometry})
	if err != nil {
		panic(err)
	}
	defer pe.Close()
	de, _ := pullconn.NewEngine(connector.EngineConfig{EngineID: "decode", Model: "llama", Geometry: geometry})
	defer de.Close()
	prod, err := pullconn.NewProducer(pe, pullconn.Config{RankConfig: connector.RankConfig{Agent: pa, Layout: playout}})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, _ := pullconn.NewConsumer(de, pullconn.Config{RankConfig: connector.RankConfig{Agent: da, Layout: dlayout}})
	defer cons.Close()

	copy(pbuf.Bytes(), "KV of request 1")
	// Prefill: the request finished in blocks 0 and 1.
	params, _ := prod.RequestFinished("req-1", []int{0, 1})
	// The proxy passes params (vLLM's kv_transfer_params) to decode, which
	// allocated blocks 5 and 6 for the request.
	if err := cons.Load("req-1", params, []int{5, 6}); err != nil {
		panic(err)
	}
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
	off := 5 * dlayout.BlockLen()
	fmt.Printf("decode block 5 starts with %q\n", dbuf.Bytes()[off:off+15])
	// Output:
	// decode: req-1 done, err=<nil>
	// prefill: free [req-1]
	// decode block 5 starts with "KV of request 1"
}
