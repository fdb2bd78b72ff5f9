package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
)

// The staged modes (stack.ModePushStaged, stack.ModePushProgressiveStaged)
// on loopback: the gather into a staging slot is a host copy of scaled
// bytes, which costs nothing like a GPU gather of the real ones, so the
// prefill engine's copier sleeps a modeled time per block gathered; and a
// staged WRITE posts one descriptor per slot run, which the post cost
// charges per descriptor even with -post-per-block.

// DefaultGatherPerBlock is the modeled cost of staging one block of one
// rank (every layer's K and V): the whole staged path of a fully
// fragmented 16k-token request (1024 blocks, 128 regions, 4 GiB) took
// 9.27 ms on one H100 (push, StagingOn, docs/gpu.md "NIXL 1.5.1 from its
// wheel"), about 9 µs a block. That figure covers gather, transfer and
// scatter together; charging all of it to the gather is an upper bound.
const DefaultGatherPerBlock = 9 * time.Microsecond

// gatherCostCopier copies host memory as the connectors' host copier does
// and sleeps perBlock for every blockBytes it copies.
type gatherCostCopier struct {
	perBlock   time.Duration
	blockBytes uint64
}

var _ connector.Copier = gatherCostCopier{}

func (c gatherCostCopier) Copy(segs []connector.Seg) error {
	var bytes uint64
	for i, s := range segs {
		if s.Len == 0 {
			continue
		}
		src, err := nixl.HostBytes(s.Src, s.Len)
		if err != nil {
			return fmt.Errorf("gather segment %d: source: %w", i, err)
		}
		dst, err := nixl.HostBytes(s.Dst, s.Len)
		if err != nil {
			return fmt.Errorf("gather segment %d: destination: %w", i, err)
		}
		copy(dst, src)
		bytes += s.Len
	}
	if c.blockBytes > 0 && c.perBlock > 0 {
		time.Sleep(time.Duration((bytes + c.blockBytes - 1) / c.blockBytes * uint64(c.perBlock)))
	}
	return nil
}

// stagingRanges are the engines' staging memory, which postCostAgent
// charges per descriptor. Set once the stack started, before any request.
type stagingRanges struct {
	mu sync.RWMutex
	rs []nixl.Desc
}

func (r *stagingRanges) add(ds ...nixl.Desc) {
	r.mu.Lock()
	r.rs = append(r.rs, ds...)
	r.mu.Unlock()
}

// contains reports whether addr lies in staging memory (r nil: none).
func (r *stagingRanges) contains(addr uint64) bool {
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, d := range r.rs {
		if addr >= d.Addr && addr-d.Addr < d.Len {
			return true
		}
	}
	return false
}
