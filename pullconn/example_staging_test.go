package pullconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
)

// stagingMem allocates two staging slots of one request's size (4 regions
// of 2 blocks here; real engines size them for their longest request).
func stagingMem(slotBytes uint64) (*nixl.Buffer, connector.Staging) {
	buf, err := nixl.AllocBuffer(int(2 * slotBytes))
	if err != nil {
		panic(err)
	}
	return buf, connector.Staging{Mode: connector.StagingOn, Mem: nixl.DRAM, Base: buf.Addr(), SlotBytes: slotBytes, Slots: 2}
}

// A fragmented request through staging slots: prefill gathers blocks 7
// and 2 into a slot when the request finishes and its Params name the
// slot; decode reads the slot in Staging.Chunks READs (4 by default, one
// per region here), scattering each as it lands, into blocks 5 and 9. On a
// GPU, Staging.Copier is connector.NewGPUCopier(device).
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

	pe, _ := pullconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "llama", Geometry: geometry})
	defer pe.Close()
	de, _ := pullconn.NewEngine(connector.EngineConfig{EngineID: "decode", Model: "llama", Geometry: geometry})
	defer de.Close()
	prod, err := pullconn.NewProducer(pe, pullconn.Config{RankConfig: connector.RankConfig{Agent: pa, Layout: playout, Staging: pst}})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, err := pullconn.NewConsumer(de, pullconn.Config{RankConfig: connector.RankConfig{Agent: da, Layout: dlayout, Staging: dst}})
	if err != nil {
		panic(err)
	}
	defer cons.Close()

	copy(pbuf.Bytes()[7*playout.BlockLen():], "first block")
	copy(pbuf.Bytes()[2*playout.BlockLen():], "second block")
	params, _ := prod.RequestFinished("req-1", []int{7, 2})
	fmt.Println("params name staging slot", *params.RemoteStagingSlot)
	if err := cons.Load("req-1", params, []int{5, 9}); err != nil {
		panic(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range cons.Drain() {
			fmt.Printf("decode: %s done, err=%v\n", r.RequestID, r.Err)
			done = true
		}
	}
	staged, _ := cons.Stats().Get("staged_transfers")
	fmt.Println("staged READs:", staged)
	fmt.Printf("block 5: %q, block 9: %q\n", dbuf.Bytes()[5*dlayout.BlockLen():][:11], dbuf.Bytes()[9*dlayout.BlockLen():][:12])
	// Output:
	// params name staging slot 0
	// decode: req-1 done, err=<nil>
	// staged READs: 1
	// block 5: "first block", block 9: "second block"
}
