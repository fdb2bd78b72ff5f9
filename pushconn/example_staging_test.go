package pushconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn"
)

// stagingMem allocates two staging slots of slotBytes each.
func stagingMem(slotBytes uint64) (*nixl.Buffer, connector.Staging) {
	buf, err := nixl.AllocBuffer(int(2 * slotBytes))
	if err != nil {
		panic(err)
	}
	return buf, connector.Staging{Mode: connector.StagingOn, Mem: nixl.DRAM, Base: buf.Addr(), SlotBytes: slotBytes, Slots: 2}
}

// A fragmented request through staging slots: decode offers a slot in its
// registration, prefill gathers blocks 7 and 2 into a slot of its own and
// WRITEs it into decode's in Staging.Chunks pieces (4 by default, one per
// region here: each gathered while the one before moves), decode scatters
// each piece into blocks 5 and 9 as it lands, and the request is done once
// all are. On a GPU, Staging.Copier is connector.NewGPUCopier(device).
func Example_staging() {
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
	slot := 2 * uint64(playout.NumRegions()) * playout.BlockLen()
	psbuf, pst := stagingMem(slot)
	dsbuf, dst := stagingMem(slot)
	defer psbuf.Free()
	defer dsbuf.Free()

	pe, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "llama", Geometry: geometry})
	defer pe.Close()
	de, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "decode", Model: "llama", Geometry: geometry})
	defer de.Close()
	prod, err := pushconn.NewProducer(pe, pushconn.Config{RankConfig: connector.RankConfig{Agent: pa, Layout: playout, Staging: pst}})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, err := pushconn.NewConsumer(de, pushconn.Config{RankConfig: connector.RankConfig{Agent: da, Layout: dlayout, Staging: dst}})
	if err != nil {
		panic(err)
	}
	defer cons.Close()

	if err := cons.Register("req-1", pushconn.Coordinates(pe), []int{5, 9}); err != nil {
		panic(err)
	}
	copy(pbuf.Bytes()[7*playout.BlockLen():], "first block")
	copy(pbuf.Bytes()[2*playout.BlockLen():], "second block")
	if _, err := prod.RequestFinished("req-1", []int{7, 2}); err != nil {
		panic(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range cons.Drain() {
			fmt.Printf("decode: %s done, err=%v\n", r.RequestID, r.Err)
			done = true
		}
	}
	// Counted before the request is done: decode scattered one staged part.
	staged, _ := cons.Stats().Get("staged_transfers")
	fmt.Println("staged parts scattered:", staged)
	fmt.Printf("block 5: %q, block 9: %q\n", dbuf.Bytes()[5*dlayout.BlockLen():][:11], dbuf.Bytes()[9*dlayout.BlockLen():][:12])
	// Output:
	// decode: req-1 done, err=<nil>
	// staged parts scattered: 1
	// block 5: "first block", block 9: "second block"
}

// hybrid is a grouped model: one full-attention layer and one Mamba2
// layer whose state slot is 64 bytes of conv state (x, B, C) and 64 of
// temporal state.
var hybrid = descriptors.Geometry{Layers: 2, KVHeads: 2, HeadDim: 8, DType: "bfloat16", BlockSize: 16, Blocks: 16, TPSize: 1,
	Groups: &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSSM, Layers: 1, Conv: []int{32, 16, 16}, State: 64}}}

// A grouped request (attention blocks and a Mamba state slot) through
// staging slots: decode offers a slot holding prefill's group image (every
// group's listed blocks, region by region, each region with its own block
// length), prefill gathers its blocks 3 and 4 and state slot 6 into it,
// and decode scatters the attention blocks into its blocks 10 and 11 and
// the state into its slot 2.
func Example_stagingGroups() {
	fab, _ := loopback.NewFabric()
	defer fab.Close()
	pa, _ := fab.NewAgent("prefill-0")
	da, _ := fab.NewAgent("decode-0")
	defer pa.Close()
	defer da.Close()
	cache := func() (*nixl.Buffer, descriptors.Layout) {
		buf, _ := nixl.AllocBuffer(int(hybrid.RankBytes()))
		l, err := hybrid.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
		if err != nil {
			panic(err)
		}
		return buf, l
	}
	pbuf, playout := cache()
	dbuf, dlayout := cache()
	defer pbuf.Free()
	defer dbuf.Free()
	psbuf, pst := stagingMem(16 << 10)
	dsbuf, dst := stagingMem(16 << 10)
	defer psbuf.Free()
	defer dsbuf.Free()

	pe, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "hybrid", Geometry: hybrid})
	defer pe.Close()
	de, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "decode", Model: "hybrid", Geometry: hybrid})
	defer de.Close()
	prod, err := pushconn.NewProducer(pe, pushconn.Config{RankConfig: connector.RankConfig{Agent: pa, Layout: playout, Staging: pst}})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, err := pushconn.NewConsumer(de, pushconn.Config{RankConfig: connector.RankConfig{Agent: da, Layout: dlayout, Staging: dst}})
	if err != nil {
		panic(err)
	}
	defer cons.Close()

	// at returns a block's bytes: region r (0 and 1: the attention layer's
	// K and V, 2: the Mamba layer), block b.
	at := func(buf *nixl.Buffer, l descriptors.Layout, r, b int) []byte {
		off := l.Regions[r].Base - buf.Addr() + uint64(b)*l.BlockLenOf(r)
		return buf.Bytes()[off : off+l.BlockLenOf(r)]
	}
	if err := cons.RegisterGroups("req-1", pushconn.Coordinates(pe), [][]int{{10, 11}, {2}}); err != nil {
		panic(err)
	}
	copy(at(pbuf, playout, 0, 3), "K of block 3")
	copy(at(pbuf, playout, 1, 4), "V of block 4")
	copy(at(pbuf, playout, 2, 6), "conv state")
	if _, err := prod.RequestFinishedGroups("req-1", 20, [][]int{{3, 4}, {6}}); err != nil {
		panic(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range cons.Drain() {
			fmt.Printf("decode: %s done, err=%v\n", r.RequestID, r.Err)
			done = true
		}
	}
	// Counted before the request is done: decode scattered one staged part.
	staged, _ := cons.Stats().Get("staged_transfers")
	fmt.Println("staged parts scattered:", staged)
	fmt.Printf("%q, %q, %q\n", at(dbuf, dlayout, 0, 10)[:12], at(dbuf, dlayout, 1, 11)[:12], at(dbuf, dlayout, 2, 2)[:10])
	// Output:
	// decode: req-1 done, err=<nil>
	// staged parts scattered: 1
	// "K of block 3", "V of block 4", "conv state"
}
