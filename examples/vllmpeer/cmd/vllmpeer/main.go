// Command vllmpeer runs the vLLM test peer (package vllmpeer) as a process
// of its own: one engine of vLLM's NIXL connector at version 12 in one of
// four roles, on NIXL agents (build with -tags nixl), against any engine
// that speaks vLLM's protocol, such as a gonixl engine with
// Protocol vllm. It prints JSON lines on stdout: "ready" (the side channel),
// "params" (a prefill's kv_transfer_params), then "done" with what it saw
// and the bytes it verified; it exits 0 only if the role completed with
// every byte right.
//
//	vllmpeer -role pull-prefill -prompt "..." -blocks 3,4,5 -timeout 60s
//	vllmpeer -role pull-decode -params '<kv_transfer_params JSON>' -prompt "..." -blocks 20,21,22
//	vllmpeer -role push-decode -prefill-engine-id P -prefill-host 127.0.0.1 -prefill-port 5600 -prefill-tp 1 ...
//	vllmpeer -role push-prefill -prompt "..." -blocks 3,4,5
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		emit(map[string]any{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
}

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

type flags struct {
	role, prompt, blocks, params, agent, backend string
	prefillID, prefillHost                       string
	prefillPort, prefillTP                       int
	timeout                                      time.Duration
	cfg                                          vllmpeer.Config
}

func parse(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("vllmpeer", flag.ContinueOnError)
	m := &f.cfg.Model
	fs.StringVar(&f.role, "role", "", "pull-prefill, pull-decode, push-prefill or push-decode")
	fs.StringVar(&f.cfg.EngineID, "engine-id", "vllmpeer", "the engine id (kv_transfer_config.engine_id)")
	fs.IntVar(&f.cfg.TPSize, "tp", 1, "tensor-parallel size: one agent and one KV buffer per rank")
	fs.StringVar(&m.Name, "model", "Qwen/Qwen2.5-7B-Instruct", "model_config.model, a hash factor")
	fs.StringVar(&m.DType, "dtype", "bfloat16", "torch dtype without \"torch.\"")
	fs.IntVar(&m.ElemBytes, "elem-bytes", 2, "bytes per element")
	fs.IntVar(&m.Layers, "layers", 28, "layers")
	fs.IntVar(&m.KVHeads, "kv-heads", 4, "the model's KV heads")
	fs.IntVar(&m.HeadDim, "head-dim", 128, "head size")
	fs.IntVar(&m.BlockSize, "block-size", 16, "tokens per block")
	fs.IntVar(&m.NumBlocks, "num-blocks", 512, "blocks per rank")
	fs.StringVar(&f.cfg.VLLMVersion, "vllm-version", "", "the vLLM version string of the peers (required)")
	fs.StringVar(&f.cfg.AttnBackend, "attn-backend", vllmpeer.DefaultAttnBackend, "attention backend name, a hash factor")
	fs.StringVar(&f.cfg.KVLayout, "kv-layout", vllmpeer.DefaultKVLayout, "kv_cache_layout")
	fs.StringVar(&f.cfg.Host, "host", "127.0.0.1", "side channel host (VLLM_NIXL_SIDE_CHANNEL_HOST)")
	fs.IntVar(&f.cfg.Port, "port", 0, "side channel port (VLLM_NIXL_SIDE_CHANNEL_PORT + DP index; 0: a free one)")
	fs.DurationVar(&f.cfg.Lease, "lease", vllmpeer.DefaultLease, "pull prefill: kv_lease_duration")
	fs.StringVar(&f.agent, "agent", "nixl", "nixl (needs -tags nixl) or loopback (in-process only: for trying the flags)")
	fs.StringVar(&f.backend, "nixl-backend", "UCX", "NIXL backend")
	fs.StringVar(&f.prompt, "prompt", "", "the prompt, tokenized as the reference engine does (docs/kvfill.md)")
	fs.StringVar(&f.blocks, "blocks", "", "the request's block ids, comma-separated")
	fs.StringVar(&f.params, "params", "", "pull decode: kv_transfer_params JSON")
	fs.StringVar(&f.prefillID, "prefill-engine-id", "", "push decode: the prefill engine's id")
	fs.StringVar(&f.prefillHost, "prefill-host", "127.0.0.1", "push decode: the prefill engine's side channel host")
	fs.IntVar(&f.prefillPort, "prefill-port", 0, "push decode: the prefill engine's side channel port")
	fs.IntVar(&f.prefillTP, "prefill-tp", 1, "push decode: the prefill engine's TP size")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "how long the role may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch f.role {
	case "pull-prefill", "pull-decode":
		f.cfg.Mode = vllmpeer.ModePull
	case "push-prefill", "push-decode":
		f.cfg.Mode = vllmpeer.ModePush
	default:
		return nil, fmt.Errorf("-role is %q, want pull-prefill, pull-decode, push-prefill or push-decode", f.role)
	}
	return f, nil
}

func blockList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		b, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("-blocks: %q is not a block id", p)
		}
		out = append(out, b)
	}
	return out, nil
}

func agents(kind, backend string) (func(string) (nixl.Agent, error), func(), error) {
	switch kind {
	case "nixl":
		suffix := fmt.Sprintf("-%d-%d", os.Getpid(), time.Now().UnixNano()) // vLLM names agents anew at every start
		return func(name string) (nixl.Agent, error) {
			a, err := nixl.New(name+suffix, nixl.Config{ProgressThread: strings.EqualFold(backend, "LIBFABRIC")})
			if err != nil {
				return nil, err
			}
			// NIXL's default parameters, as a vLLM worker creates its
			// backend (no ucx_backend_params in its kv_connector_extra_config).
			if err := a.CreateBackend(backend, nil); err != nil {
				a.Close()
				return nil, fmt.Errorf("NIXL backend %s: %w", backend, err)
			}
			return a, nil
		}, func() {}, nil
	case "loopback":
		fab, err := loopback.NewFabric()
		if err != nil {
			return nil, nil, err
		}
		return func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }, func() { fab.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-agent is %q, want nixl or loopback", kind)
}

func run(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	blocks, err := blockList(f.blocks)
	if err != nil {
		return err
	}
	tokens := vllmpeer.Tokenize(f.prompt)
	newAgent, closeAgents, err := agents(f.agent, f.backend)
	if err != nil {
		return err
	}
	defer closeAgents()
	f.cfg.NewAgent = newAgent
	p, err := vllmpeer.New(f.cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	emit(map[string]any{"event": "ready", "role": f.role, "engine_id": p.EngineID(), "host": p.Host(), "port": p.Port(), "hash": p.Hash()})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	const reqID = "vllmpeer-req-0a1b2c3d"

	done := map[string]any{"event": "done"}
	switch f.role {
	case "pull-prefill":
		prm, err := p.Prefill(reqID, tokens, blocks)
		if err != nil {
			return err
		}
		emit(map[string]any{"event": "params", "kv_transfer_params": json.RawMessage(prm.JSON())})
		err = waitCtx(ctx, func(d time.Duration) error { return p.WaitFreed(reqID, d) })
		done["report"] = p.Report()
		if err != nil {
			emit(done)
			return err
		}
	case "pull-decode":
		prm, err := vllmpeer.ParseParams([]byte(f.params))
		if err != nil {
			return err
		}
		res, err := p.Pull(ctx, reqID, prm, blocks)
		if err != nil {
			return err
		}
		done["sent"], done["flat_block_ids"] = res.Sent, res.FlatBlockIDs
	case "push-decode":
		info := vllmpeer.PrefillInfo{EngineID: f.prefillID, Host: f.prefillHost, Port: f.prefillPort, TPSize: f.prefillTP}
		if err := p.PushRegister(ctx, reqID, info, blocks); err != nil {
			return err
		}
		if err := waitCtx(ctx, func(d time.Duration) error { return p.WaitPushed(reqID, d) }); err != nil {
			return err
		}
		done["counts"], done["expected"] = p.PushCounts(reqID)
	case "push-prefill":
		prm, err := p.PushFinished(reqID, tokens, blocks)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(prm)
		emit(map[string]any{"event": "params", "kv_transfer_params": json.RawMessage(b)})
		if err := waitCtx(ctx, func(d time.Duration) error { return p.WaitWritten(reqID, d) }); err != nil {
			return err
		}
		done["report"] = p.Report()
	}
	if f.role == "pull-decode" || f.role == "push-decode" {
		c := p.Verify(tokens, blocks)
		done["ok_bytes"], done["bad_bytes"], done["first_mismatch"] = c.OKBytes, c.BadBytes, c.First
		if c.BadBytes > 0 {
			emit(done)
			return errors.New("KV verification failed: " + c.First)
		}
	}
	emit(done)
	return nil
}

// waitCtx runs a peer wait with the time left on ctx.
func waitCtx(ctx context.Context, wait func(time.Duration) error) error {
	dl, _ := ctx.Deadline()
	return wait(time.Until(dl))
}
