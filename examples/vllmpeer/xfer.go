package vllmpeer

import (
	"context"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// targetRanks is vLLM's handshake_target_ranks for DCP 1: the remote TP
// ranks that local rank lr exchanges blocks with. With more local ranks
// than remote, k local ranks share one remote rank (each holds 1/k of its
// heads); with more remote ranks, each local rank takes k remote ranks.
func targetRanks(localTP, remoteTP, lr int) ([]int, error) {
	if localTP%remoteTP != 0 && remoteTP%localTP != 0 {
		return nil, fmt.Errorf("vllmpeer: TP sizes %d and %d do not divide each other", localTP, remoteTP)
	}
	if localTP >= remoteTP {
		return []int{lr / (localTP / remoteTP)}, nil
	}
	k := remoteTP / localTP
	out := make([]int, k)
	for i := range out {
		out[i] = lr*k + i
	}
	return out, nil
}

// remoteEngine is what the handshakes with one engine learned: the
// metadata of each remote rank, the agent names each local rank's agent
// gave them, and the clock offset.
type remoteEngine struct {
	id     string
	host   string
	port   int
	tp     int
	md     map[int]agentMetadata // by remote TP rank
	agents map[[2]int]string     // (local rank, remote rank) -> name
	offset float64               // remote clock - local clock, seconds
}

// handshake fetches and loads, once per engine, the metadata of every
// remote rank a local rank exchanges with, into that local rank's agent.
// notifOnly is vLLM's notif-only handshake: the agents are loaded but no
// layout is checked, because no block of that engine is addressed.
func (p *Peer) handshake(ctx context.Context, engineID, host string, port, remoteTP int, notifOnly bool) (*remoteEngine, error) {
	// One handshake at a time: two ranks' WRITEs to one decode must not load
	// its agents twice.
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	p.mu.Lock()
	re := p.remotes[engineID]
	p.mu.Unlock()
	if re != nil {
		if !notifOnly {
			for r, md := range re.md {
				if err := p.checkRemote(re, r, md); err != nil {
					return nil, err
				}
			}
		}
		return re, nil
	}
	want := map[int]bool{}
	for lr := range p.cfg.TPSize {
		ts, err := targetRanks(p.cfg.TPSize, remoteTP, lr)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			want[t] = true
		}
	}
	ranks := make([]int, 0, len(want))
	for r := range remoteTP {
		if want[r] {
			ranks = append(ranks, r)
		}
	}
	mds, offset, err := fetch(ctx, host, port, ranks, p.hash, engineID, p.cfg.HandshakeTimeout)
	if err != nil {
		return nil, err
	}
	re = &remoteEngine{id: engineID, host: host, port: port, tp: remoteTP, md: map[int]agentMetadata{}, agents: map[[2]int]string{}, offset: offset}
	for i, r := range ranks {
		re.md[r] = mds[i]
		if !notifOnly {
			if err := p.checkRemote(re, r, mds[i]); err != nil {
				return nil, err
			}
		}
	}
	for lr := range p.cfg.TPSize {
		ts, _ := targetRanks(p.cfg.TPSize, remoteTP, lr)
		for _, r := range ts {
			name, err := p.agents[lr].LoadRemoteMD(re.md[r].AgentMetadata)
			if err != nil {
				return nil, fmt.Errorf("vllmpeer: rank %d: load the agent metadata of %s tp %d: %w", lr, engineID, r, err)
			}
			re.agents[[2]int{lr, r}] = name
		}
	}
	p.mu.Lock()
	p.remotes[engineID] = re
	p.mu.Unlock()
	return re, nil
}

// checkRemote refuses a remote rank whose regions this peer cannot address
// as vLLM would: another layout, region count or block geometry.
func (p *Peer) checkRemote(re *remoteEngine, r int, md agentMetadata) error {
	m := p.cfg.Model
	local := p.kv[0].blockLen
	var want uint64
	switch lt, rt := p.cfg.TPSize, re.tp; {
	case lt >= rt:
		want = uint64(local * (lt / rt))
	default:
		want = uint64(local / (rt / lt))
	}
	switch {
	case md.KVCacheLayout != p.cfg.KVLayout:
		return fmt.Errorf("vllmpeer: %s tp %d: kv_cache_layout is %q, this engine's is %q", re.id, r, md.KVCacheLayout, p.cfg.KVLayout)
	case len(md.KVCachesBaseAddr) != m.Layers:
		return fmt.Errorf("vllmpeer: %s tp %d: kv_caches_base_addr has %d regions, this engine has %d", re.id, r, len(md.KVCachesBaseAddr), m.Layers)
	case len(md.BlockLens) != m.Layers || len(md.BlockStrides) != m.Layers:
		return fmt.Errorf("vllmpeer: %s tp %d: block_lens has %d and block_strides %d entries, want %d", re.id, r, len(md.BlockLens), len(md.BlockStrides), m.Layers)
	case md.RegionNumBlocks != nil && len(md.RegionNumBlocks) != m.Layers:
		return fmt.Errorf("vllmpeer: %s tp %d: region_num_blocks has %d entries, want %d", re.id, r, len(md.RegionNumBlocks), m.Layers)
	case md.BlockSize != m.BlockSize:
		return fmt.Errorf("vllmpeer: %s tp %d: block_size is %d, this engine's is %d (block-size ratios are not played)", re.id, r, md.BlockSize, m.BlockSize)
	case md.PhysicalBlocksPerLogical != 1 || md.DCPSize != 1 || md.PCPSize != 1:
		return fmt.Errorf("vllmpeer: %s tp %d: physical_blocks_per_logical_kv_block %d, dcp_size %d, pcp_size %d; the peer plays 1, 1, 1", re.id, r, md.PhysicalBlocksPerLogical, md.DCPSize, md.PCPSize)
	}
	for i, l := range md.BlockLens {
		if l != want {
			return fmt.Errorf("vllmpeer: %s tp %d: block_lens[%d] is %d, want %d for TP %d against %d", re.id, r, i, l, want, re.tp, p.cfg.TPSize)
		}
		if md.BlockStrides[i] < l {
			return fmt.Errorf("vllmpeer: %s tp %d: block_strides[%d] is %d, below block_lens' %d", re.id, r, i, md.BlockStrides[i], l)
		}
	}
	return nil
}

// regionBlocks is each remote region's block count.
func regionBlocks(md agentMetadata) []int {
	if md.RegionNumBlocks != nil {
		return md.RegionNumBlocks
	}
	out := make([]int, len(md.KVCachesBaseAddr))
	for i := range out {
		out[i] = md.NumBlocks
	}
	return out
}

// xfer moves one request's blocks between local rank lr and remote rank rr
// as vLLM's worker does: a local list prepared on "" (split into k parts
// when the remote side has k times the ranks), a remote list of every
// (region, block) of the remote rank at its head offset, descriptor ids
// region-major, one request with the notification, polled to its end.
func (p *Peer) xfer(ctx context.Context, op nixl.XferOp, lr int, re *remoteEngine, rr int, localBlocks, remoteBlocks []int, notif string) error {
	if len(localBlocks) != len(remoteBlocks) {
		return fmt.Errorf("vllmpeer: %d local blocks against %d remote", len(localBlocks), len(remoteBlocks))
	}
	k := p.kv[lr]
	md := re.md[rr]
	name := re.agents[[2]int{lr, rr}]
	lt, rt := p.cfg.TPSize, re.tp
	n, part, unit, offset := 1, 0, uint64(k.blockLen), uint64(0)
	switch {
	case lt > rt: // this rank's heads are one slice of each remote block
		offset = uint64((lr % (lt / rt)) * k.blockLen)
	case rt > lt: // each remote rank fills one slice of each local block
		n = rt / lt
		part = rr - lr*n
		unit = uint64(k.blockLen / n)
	}
	local := k.blockDescs(n, part)
	counts := regionBlocks(md)
	remote := nixl.XferList{Mem: nixl.DRAM}
	if len(md.RegionMemTypes) > 0 && md.RegionMemTypes[0] == "VRAM" {
		remote.Mem = nixl.VRAM
	}
	starts := make([]int, len(counts))
	for r, base := range md.KVCachesBaseAddr {
		if r > 0 {
			starts[r] = starts[r-1] + counts[r-1]
		}
		for b := range counts[r] {
			remote.Descs = append(remote.Descs, nixl.Desc{Addr: base + offset + uint64(b)*md.BlockStrides[r], Len: unit, DevID: uint64(md.DeviceID)})
		}
	}
	a := p.agents[lr]
	lh, err := a.PrepXferDlist("", local, nil)
	if err != nil {
		return fmt.Errorf("vllmpeer: rank %d: prepare the local list: %w", lr, err)
	}
	defer a.ReleaseDlistHandle(lh)
	rh, err := a.PrepXferDlist(name, remote, nil)
	if err != nil {
		return fmt.Errorf("vllmpeer: rank %d: prepare %s tp %d's list: %w", lr, re.id, rr, err)
	}
	defer a.ReleaseDlistHandle(rh)
	var li, ri []int
	for r := range p.cfg.Model.Layers {
		for i := range localBlocks {
			if remoteBlocks[i] < 0 || remoteBlocks[i] >= counts[r] {
				return fmt.Errorf("vllmpeer: remote block %d is outside %s tp %d's %d", remoteBlocks[i], re.id, rr, counts[r])
			}
			li = append(li, r*p.cfg.Model.NumBlocks+localBlocks[i])
			ri = append(ri, starts[r]+remoteBlocks[i])
		}
	}
	h, err := a.MakeXferReq(op, lh, li, rh, ri, nixl.NotifOptions([]byte(notif)))
	if err != nil {
		return fmt.Errorf("vllmpeer: rank %d: make the %v to %s tp %d: %w", lr, op, re.id, rr, err)
	}
	defer a.ReleaseXferReq(h)
	st, err := a.PostXferReq(h, nil)
	for err == nil && st != nixl.StatusSuccess {
		select {
		case <-ctx.Done():
			return fmt.Errorf("vllmpeer: rank %d: %v to %s tp %d did not end: %w", lr, op, re.id, rr, ctx.Err())
		case <-time.After(100 * time.Microsecond):
		}
		st, err = a.XferStatus(h)
	}
	if err != nil {
		return fmt.Errorf("vllmpeer: rank %d: %v to %s tp %d: %w", lr, op, re.id, rr, err)
	}
	return nil
}
