package pushconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn"
)

// kvCache allocates one rank's KV cache (2 layers, 8 heads of 128 bytes,
// 64 blocks of 16 tokens) and describes it.
func kvCache() (*nixl.Buffer, descriptors.Layout) {
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: 64, BlockSize: 16,
		KVHeads: 8, HeadBytes: 128, DType: "bfloat16", TPSize: 1}
	buf, err := nixl.AllocBuffer(int(l.RegionLen()) * l.NumRegions())
	if err != nil {
		panic(err)
	}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	return buf, l
}

// One prefill engine and one decode engine of one TP rank each, on loopback
// agents: decode registers its blocks before prefill has finished, prefill
// writes into them the moment it does.
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

	pe, err := pushconn.NewEngine(pushconn.EngineConfig{EngineID: "prefill", Model: "llama", DType: "bfloat16", TPSize: 1, BlockSize: 16})
	if err != nil {
		panic(err)
	}
	defer pe.Close()
	de, _ := pushconn.NewEngine(pushconn.EngineConfig{EngineID: "decode", Model: "llama", DType: "bfloat16", TPSize: 1, BlockSize: 16})
	defer de.Close()
	prod, err := pushconn.NewProducer(pe, pushconn.RankConfig{Agent: pa, Layout: playout})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, _ := pushconn.NewConsumer(de, pushconn.RankConfig{Agent: da, Layout: dlayout})
	defer cons.Close()

	// The proxy picked both engines before prefill runs and told decode
	// where prefill is; decode allocated blocks 5 and 6 and registers them.
	if err := cons.Register("req-1", pe.Coordinates(), []int{5, 6}); err != nil {
		panic(err)
	}
	// Prefill computes the request into blocks 0 and 1, then hands them over.
	copy(pbuf.Bytes(), "KV of request 1")
	if _, err := prod.RequestFinished("req-1", []int{0, 1}); err != nil {
		panic(err)
	}
	// Engine loops: drain without blocking, once per step (or wait on
	// cons.Ready()).
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
