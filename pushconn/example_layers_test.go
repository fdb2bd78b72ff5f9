package pushconn_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn"
)

// Per-layer progress: prefill's forward pass of a chunk ends layer by
// layer, and the engine reports each layer as it ends
// (connector.Request.FinalLayers); push writes each into decode's blocks
// at once, and at RequestFinished only what is left, with the completion.
func Example_progressPerLayer() {
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
	pe, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "llama", Geometry: geometry})
	defer pe.Close()
	de, _ := pushconn.NewEngine(connector.EngineConfig{EngineID: "decode", Model: "llama", Geometry: geometry})
	defer de.Close()
	prod, err := pe.NewProducer(connector.RankConfig{Agent: pa, Layout: playout})
	if err != nil {
		panic(err)
	}
	defer prod.Close()
	cons, _ := pushconn.NewConsumer(de, pushconn.Config{RankConfig: connector.RankConfig{Agent: da, Layout: dlayout}})
	defer cons.Close()
	if err := cons.Register("req-1", pushconn.Coordinates(pe), []int{5, 6}); err != nil {
		panic(err)
	}

	// Layer 0 of both blocks is computed: its K region is the layout's
	// first, block 0 at its start.
	copy(pbuf.Bytes(), "layer 0 of request 1")
	req := connector.Request{ID: "req-1", Blocks: [][]int{{0, 1}}, Tokens: 20, FinalLayers: 1}
	progress := prod.(connector.ProgressReporter)
	if err := progress.Progress(req); err != nil {
		panic(err)
	}
	// The last layer: RequestFinished writes it with the completion.
	req.FinalLayers = 0
	if _, err := prod.RequestFinished(req); err != nil {
		panic(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if rs := cons.Drain(); len(rs) > 0 {
			fmt.Printf("decode: %s done, err=%v\n", rs[0].RequestID, rs[0].Err)
			break
		}
	}
	off := 5 * dlayout.BlockLen()
	fmt.Printf("decode block 5 starts with %q\n", dbuf.Bytes()[off:off+20])
	// Output:
	// decode: req-1 done, err=<nil>
	// decode block 5 starts with "layer 0 of request 1"
}
