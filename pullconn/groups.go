package pullconn

import (
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/staging"
)

// This file holds the grouped variants of the pull calls, for layouts of
// several KV-cache groups (descriptors.Layout.Groups: sliding-window
// layers beside full attention, Mamba state beside attention): the block
// ids come one list per group, in the layout's group order, as vLLM's
// remote_block_ids and local_block_ids do. The single-group calls
// (RequestFinished, Load) stay the simple case; a grouped layout needs
// these.

// RequestFinishedGroups is RequestFinished for a grouped layout: blockIDs
// holds one list of the rank's logical block ids per KV-cache group, each
// a suffix of the request in token order (a sliding-window group lists
// only the blocks its window touches), and tokens is the request's length
// the lists cover (vLLM's num_computed_tokens). The Params carry both
// (RemoteGroupBlockIDs, NumTokens; remote_block_ids as a list of lists and
// remote_num_tokens in JSON). Staging does not apply to grouped requests:
// decode reads their blocks where they are.
func (p *Producer) RequestFinishedGroups(requestID string, tokens int, blockIDs [][]int) (Params, error) {
	if err := p.checkFinished(requestID); err != nil {
		return Params{}, err
	}
	if tokens < 1 && !groupids.Empty(blockIDs) {
		return Params{}, invalidf("request %q: tokens is %d, want >= 1", requestID, tokens)
	}
	if err := groupids.Check(&p.cfg.Layout, "blockIDs", blockIDs); err != nil {
		return Params{}, invalidf("request %q: %v", requestID, err)
	}
	return p.requestFinished(requestID, nil, groupids.Copy(blockIDs), tokens)
}

// LoadGroups is Load for a grouped layout: localBlocks holds one list of
// decode's logical block ids per KV-cache group, each the suffix of the
// request still to fill (after a prefix hit, which may differ from group to
// group, and without a sliding window's blocks before the window), and p
// must be grouped Params (RemoteGroupBlockIDs, NumTokens). Every list empty
// means decode already has the request: only the completions are sent.
func (c *Consumer) LoadGroups(requestID string, p Params, localBlocks [][]int) error {
	l, err := c.newGroupLoad(requestID, &p, localBlocks)
	if err != nil {
		c.rejects.Inc()
		return err
	}
	l.prefixHits = prefixHits(&c.cfg.Layout, l.p.NumTokens, l.groups)
	return c.startLoad(requestID, p, l)
}

// newGroupLoad checks a grouped load's arguments without touching any
// state.
func (c *Consumer) newGroupLoad(id string, p *Params, local [][]int) (*load, error) {
	if p.RemoteGroupBlockIDs == nil && p.RemoteBlockIDs != nil && len(local) == 1 {
		// A layout of one group: its Params read back with the one list
		// flat (groupids.Decode).
		p.RemoteGroupBlockIDs, p.RemoteBlockIDs = [][]int{p.RemoteBlockIDs}, nil
	}
	switch {
	case p.RemoteGroupBlockIDs == nil:
		return nil, invalidf("request %q: Params.RemoteBlockIDs is not a list per KV-cache group: the prefill did not use RequestFinishedGroups", id)
	case p.RemoteBlockIDs != nil:
		return nil, invalidf("request %q: Params name both a flat RemoteBlockIDs and RemoteGroupBlockIDs", id)
	case len(p.RemoteGroupBlockIDs) != len(local):
		return nil, invalidf("request %q: Params.RemoteBlockIDs has %d KV-cache group lists, localBlocks %d", id, len(p.RemoteGroupBlockIDs), len(local))
	}
	if err := groupids.Check(&c.cfg.Layout, "localBlocks", local); err != nil {
		return nil, invalidf("request %q: %v", id, err)
	}
	l, err := c.newLoad(id, p, nil)
	if err != nil {
		return nil, err
	}
	l.p.RemoteGroupBlockIDs = groupids.Copy(p.RemoteGroupBlockIDs)
	l.groups = groupids.Copy(local)
	l.local = groupids.Flatten(local)
	return l, nil
}

// mapInto maps a load's blocks from prefill layout src into tr: one
// group's request (req) for a single-group load, every group's lists
// (descriptors.MapGroupsInto) for a grouped one.
func (c *reader) mapInto(tr *descriptors.Transfer, l *load, src *descriptors.Layout, req descriptors.Request) error {
	if l.groups == nil {
		_, err := descriptors.MapCoalescedInto(tr, src, &c.cfg.Layout, req)
		return err
	}
	_, err := descriptors.MapGroupsInto(tr, src, &c.cfg.Layout, descriptors.GroupRequest{
		Tokens: l.p.NumTokens, Src: l.p.RemoteGroupBlockIDs, Dst: l.groups})
	return err
}

// gatherGroups is gather for a grouped request: each group's listed
// blocks, whole, into the slot's group image (staging.GroupGatherBlocks).
func (p *Producer) gatherGroups(id string, lists [][]int) (int, bool, error) {
	l := &p.cfg.Layout
	size, err := staging.GroupImageSize(l, lists)
	if err != nil {
		return 0, false, nil // not stageable (a region two groups share): read directly
	}
	descs := 0
	for gi, g := range l.GroupList() {
		descs += runs(lists[gi]) * len(g.Regions)
	}
	return p.gatherInto(id, size, descs, !groupids.Empty(lists), func(base uint64) error {
		copies, err := staging.GroupGatherBlocks(l, lists, base)
		for _, bc := range copies {
			if err != nil {
				break
			}
			err = p.stage.CopyBlocks(p.cfg.Staging.Copier, bc)
		}
		return err
	})
}
