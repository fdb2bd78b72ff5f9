package main

import (
	"sync"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// postCostAgent models what posting a transfer costs the calling thread in
// NIXL: a fixed time per descriptor (UCX posts one operation per
// descriptor), spent inside PostXferReq before the transfer starts. The
// loopback agent posts in nanoseconds, so without this a benchmark on
// loopback would hide the cost that decides where READs should be posted: on
// the engine loop (pull-inline) it delays every decode step; on a connector
// goroutine (pull, push) it delays only the transfer.
//
// With blockBytes set, the cost is charged per block of blockBytes instead
// of per descriptor: what a connector that posts one descriptor per block
// and region (vLLM's NixlConnector, which does not merge adjacent blocks)
// would pay for the same bytes.
//
// A descriptor in staging memory (staged, a slot's run) is charged as one
// descriptor either way: that is what a staged WRITE posts.
type postCostAgent struct {
	nixl.Agent
	perDesc    time.Duration
	blockBytes uint64
	staging    *stagingRanges

	mu    sync.Mutex
	descs map[nixl.XferHandle]int
}

var _ nixl.Agent = (*postCostAgent)(nil)

func withPostCost(a nixl.Agent, perDesc time.Duration, blockBytes uint64, staging *stagingRanges) nixl.Agent {
	if perDesc <= 0 {
		return a
	}
	return &postCostAgent{Agent: a, perDesc: perDesc, blockBytes: blockBytes, staging: staging, descs: map[nixl.XferHandle]int{}}
}

func (a *postCostAgent) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, remoteAgent string, opts *nixl.Options) (nixl.XferHandle, error) {
	h, err := a.Agent.CreateXferReq(op, local, remote, remoteAgent, opts)
	if err == nil {
		n := len(local.Descs)
		if a.blockBytes > 0 {
			var bytes uint64
			n = 0
			for _, d := range local.Descs {
				if a.staging.contains(d.Addr) {
					n++
					continue
				}
				bytes += uint64(d.Len)
			}
			n += int((bytes + a.blockBytes - 1) / a.blockBytes)
		}
		a.remember(h, n)
	}
	return h, err
}

func (a *postCostAgent) MakeXferReq(op nixl.XferOp, local nixl.DlistHandle, localIdx []int, remote nixl.DlistHandle, remoteIdx []int, opts *nixl.Options) (nixl.XferHandle, error) {
	h, err := a.Agent.MakeXferReq(op, local, localIdx, remote, remoteIdx, opts)
	if err == nil {
		a.remember(h, len(localIdx))
	}
	return h, err
}

func (a *postCostAgent) remember(h nixl.XferHandle, n int) {
	a.mu.Lock()
	a.descs[h] = n
	a.mu.Unlock()
}

func (a *postCostAgent) PostXferReq(h nixl.XferHandle, opts *nixl.Options) (nixl.Status, error) {
	a.mu.Lock()
	n := a.descs[h]
	a.mu.Unlock()
	if n > 0 {
		time.Sleep(time.Duration(n) * a.perDesc) // a sleep, not a spin: the model must not eat the benchmark's CPU
	}
	return a.Agent.PostXferReq(h, opts)
}

func (a *postCostAgent) ReleaseXferReq(h nixl.XferHandle) error {
	a.mu.Lock()
	delete(a.descs, h)
	a.mu.Unlock()
	return a.Agent.ReleaseXferReq(h)
}
