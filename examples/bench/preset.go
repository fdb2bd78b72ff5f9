package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// preset is a sweep's whole setting: the grid, the engines and the link.
type preset struct {
	Name        string
	Description string
	Modes       []string
	Rates       []float64
	InputLens   []int
	OutputLen   int
	// Prompts is the number of prompts of a point at a rate.
	Prompts func(rate float64) int
	// Model is the KV geometry the engines allocate and move; Modeled is
	// the geometry it stands for. The link and the post cost are scaled by
	// their ratio, so a transfer takes the modeled time while the bytes
	// moved (and verified on decode) stay small enough for this machine.
	Model, Modeled server.ModelSpec
	Compute        server.ComputeModel
	TPSize         int
	NumBlocks      int
	MaxBatch       int
	// Lease is prefill's hold on finished blocks; RequestTimeout bounds a
	// request's waits in the engines.
	Lease, RequestTimeout time.Duration
	// LinkBytesPerSec and LinkLatency model one TP rank's link (modeled
	// bytes); PostPerDescriptor is NIXL's cost of posting one descriptor of
	// the modeled geometry.
	LinkBytesPerSec   float64
	LinkLatency       time.Duration
	PostPerDescriptor time.Duration
	// EngineArgs are the examples/engine flags of the same engines, for a
	// sweep of separate processes (which moves real bytes: the link and the
	// post cost are not modeled there).
	EngineArgs []string
	// PostPerBlock charges the post cost per block and region moved, as a
	// connector that never merges adjacent blocks (vLLM's) posts them,
	// instead of per descriptor gonixl posts.
	PostPerBlock bool
	// Replicas is the number of engines of the collocated mode, each with
	// the preset's TP size and compute model (stack.DefaultReplicas: the
	// split's two engines' hardware).
	Replicas int
}

// qwen3H200 is the published experiment of vLLM's push connector: Qwen3-32B,
// one prefill and one decode node of 8 H200 each (TP 8), 3.2 Tb/s of EFA
// between them (400 Gb/s per GPU), inputs 1k-16k, 1-8 QPS, 128 output
// tokens.
var qwen3H200 = func() preset {
	modeled, compute, _ := server.Preset("qwen3-32b")
	// One layer and 16-wide heads instead of 64 layers of 128: 2 regions
	// instead of 128 (each stands for 64), 512-byte blocks instead of 4 KiB.
	model := modeled
	model.Name = "Qwen/Qwen3-32B"
	model.Layers, model.HeadDim = 1, 16
	return preset{
		Name:        "qwen3-32b-h200",
		Description: "Qwen3-32B TP 8 on H200 (engine compute model server.Qwen3_32B_H200_TP8), 3.2 Tb/s per node pair (50 GB/s per rank), NIXL post cost 6 µs per descriptor",
		Modes:       []string{"pull", "pull-inline", "push", "collocated"},
		Rates:       []float64{1, 2, 4, 8},
		InputLens:   []int{1024, 4096, 8192, 16384},
		OutputLen:   128,
		Prompts:     func(rate float64) int { return max(20, int(10*rate)) },
		Model:       model, Modeled: modeled, Compute: compute, TPSize: 8,
		NumBlocks: 65536, MaxBatch: 256,
		// vLLM's defaults: VLLM_NIXL_ABORT_REQUEST_TIMEOUT is 480 s, and a
		// request waits in the engine as long as it must.
		Lease: 480 * time.Second, RequestTimeout: 10 * time.Minute,
		LinkBytesPerSec: 50e9, LinkLatency: 20 * time.Microsecond,
		// docs/gpu.md: 131,072 descriptors of a 16k-token request moved at
		// 5-6 GB/s through NIXL on one H200, about 6 µs per descriptor.
		PostPerDescriptor: 6 * time.Microsecond,
		EngineArgs: []string{"-model", "qwen3-32b", "-layers", "1", "-head-dim", "16", "-tp", "8", "-num-blocks", "65536",
			"-max-num-seqs", "256", "-served-model-name", "Qwen/Qwen3-32B"},
	}
}()

// qwen3H200Layers is qwen3H200 with 16 layers in the engines' scaled
// geometry, for per-layer progress (stack.ModePushProgressiveLayers): the
// one layer of qwen3H200 has nothing to report per layer. Each layer
// stands for 4 of Qwen3-32B's 64, and its heads are 1 wide instead of 16
// (2-byte rows), so a block of a rank is 1 KiB as in qwen3H200, a
// descriptor stands for 4 (32 regions instead of 128) and a byte moved for
// 512. Not 64 layers: on the 2-core machine (polyglot) the work of the
// engines and agents, which grows with blocks x regions, then took 0.9 s
// of CPU per 16k request (the bench process, push, one request at a
// time), more than its modeled prefill, and a lone request's TTFT more
// than doubled (947 ms against qwen3H200's 402 ms; 16 layers: 460 ms).
var qwen3H200Layers = func() preset {
	p := qwen3H200
	p.Name = "qwen3-32b-h200-layers"
	p.Description = "qwen3-32b-h200 with 16 layers (each for 4 of the model's 64) in the engines' scaled geometry, 1-wide heads, for per-layer progress"
	p.Model.Layers, p.Model.HeadDim = 16, 1
	p.EngineArgs = slices.Clone(p.EngineArgs)
	for i, a := range p.EngineArgs {
		switch a {
		case "-layers":
			p.EngineArgs[i+1] = strconv.Itoa(p.Model.Layers)
		case "-head-dim":
			p.EngineArgs[i+1] = "1"
		}
	}
	return p
}()

// small is a preset for tests and a quick look: a small model, a short grid.
var small = preset{
	Name: "small", Description: "a 4-layer model, TP 2, 2 GB/s links, 2 µs per descriptor",
	Modes: []string{"pull", "pull-inline", "push", "collocated"}, Rates: []float64{20}, InputLens: []int{64},
	OutputLen: 8, Prompts: func(float64) int { return 20 },
	Model:   server.ModelSpec{Name: "small-4l", Layers: 4, KVHeads: 4, HeadDim: 64, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2},
	Compute: server.ComputeModel{PrefillBase: time.Millisecond, PrefillPerToken: 5 * time.Microsecond, DecodeBase: 2 * time.Millisecond},
	TPSize:  2, NumBlocks: 2048, LinkBytesPerSec: 2e9, LinkLatency: 50 * time.Microsecond, PostPerDescriptor: 2 * time.Microsecond,
	// The engine's qwen2.5-7b compute at a fifth: of the order of the
	// compute above.
	EngineArgs: []string{"-model", "qwen2.5-7b", "-layers", "4", "-kv-heads", "4", "-head-dim", "64", "-tp", "2", "-num-blocks", "2048",
		"-served-model-name", "small-4l", "-compute-scale", "0.2"},
}

// grouped returns the preset of the engine's grouped demo model name
// ("swa-demo": full attention beside sliding-window layers; "hybrid-demo":
// attention beside Mamba2 state), on small's grid and links: the sweep of
// a model whose KV-cache groups the connectors move with their grouped
// calls.
func grouped(name, what string) preset {
	p := small
	p.Name, p.Description = name, what+", TP 2, 2 GB/s links, 2 µs per descriptor"
	p.Model, p.Compute, _ = server.Preset(name)
	p.EngineArgs = []string{"-model", name, "-num-blocks", "2048", "-served-model-name", name}
	return p
}

var (
	swaDemo    = grouped("swa-demo", "full-attention layers beside sliding-window ones (window 128)")
	hybridDemo = grouped("hybrid-demo", "an attention layer beside two Mamba2 layers")
	presets    = map[string]preset{qwen3H200.Name: qwen3H200, qwen3H200Layers.Name: qwen3H200Layers, small.Name: small, swaDemo.Name: swaDemo, hybridDemo.Name: hybridDemo}
)

func presetByName(name string) (preset, error) {
	p, ok := presets[name]
	if !ok {
		return p, fmt.Errorf("preset %q: want %q, %q, %q, %q or %q", name, qwen3H200.Name, qwen3H200Layers.Name, small.Name, swaDemo.Name, hybridDemo.Name)
	}
	return p, nil
}

// scale is how many modeled bytes one byte moved stands for, and how many
// modeled descriptors one descriptor moved stands for.
func (p preset) scale() (bytes, descs float64) {
	if p.Modeled == (server.ModelSpec{}) {
		return 1, 1
	}
	descs = float64(p.Modeled.Layers) / float64(p.Model.Layers)
	bytes = descs * float64(p.Modeled.HeadDim*p.Modeled.DTypeBytes) / float64(p.Model.HeadDim*p.Model.DTypeBytes)
	return bytes, descs
}

// link is the loopback transfer model of one rank's link, in the bytes the
// engines move.
func (p preset) link() loopback.TransferModel {
	b, _ := p.scale()
	return loopback.Bandwidth(p.LinkBytesPerSec/b, p.LinkLatency)
}

// postCost is the post cost of one descriptor the engines move.
func (p preset) postCost() time.Duration {
	_, d := p.scale()
	return time.Duration(float64(p.PostPerDescriptor) * d)
}

// rankBlockBytes is one block of one rank, every region: what the staged
// modes' gather cost is charged per.
func (p preset) rankBlockBytes() uint64 {
	heads := max(p.Model.KVHeads/p.TPSize, 1)
	return uint64(2 * p.Model.Layers * p.Model.BlockSize * heads * p.Model.HeadDim * p.Model.DTypeBytes)
}

// gatherPerBlock is the staged modes' modeled gather cost per block of a
// rank (DefaultGatherPerBlock).
func (p preset) gatherPerBlock() time.Duration { return DefaultGatherPerBlock }

// postBlockBytes is the block size of one region the post cost is charged
// per with PostPerBlock (0: per descriptor).
func (p preset) postBlockBytes() uint64 {
	if !p.PostPerBlock {
		return 0
	}
	heads := max(p.Model.KVHeads/p.TPSize, 1)
	return uint64(p.Model.BlockSize * heads * p.Model.HeadDim * p.Model.DTypeBytes)
}
