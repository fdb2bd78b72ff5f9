package pushconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
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
