package promstats_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/promstats"
	"github.com/gonixl/gonixl/pullconn"
)

// Register one collector per connector rank (or engine), labelled so that
// ranks side by side stay apart, with vLLM's metric names.
func Example() {
	e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "prefill-0", Model: "m",
		Geometry: descriptors.Geometry{Layers: 2, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 64, TPSize: 1}})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.New(e, promstats.Options{VLLMNames: true, ConstLabels: prometheus.Labels{"engine_id": e.ID()}}))
	fams, _ := reg.Gather()
	for _, f := range fams {
		if strings.Contains(f.GetName(), "xfer_time") || strings.Contains(f.GetName(), "failed_transfers") {
			fmt.Println(f.GetName(), f.GetType())
		}
	}
	// Output:
	// vllm:nixl_num_failed_transfers_total COUNTER
	// vllm:nixl_xfer_time_seconds HISTOGRAM
}
