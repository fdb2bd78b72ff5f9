package pushconn

import (
	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/notif"
)

// This file holds the grouped variants of the push calls, for layouts of
// several KV-cache groups (descriptors.Layout.Groups: sliding-window
// layers beside full attention, Mamba state beside attention): the block
// ids come one list per group, in the layout's group order, as PUSH_REG's
// local_block_ids and vLLM's remote_block_ids carry them. The
// single-group calls (RequestFinished, Register) stay the simple case; a
// grouped layout needs these. They are named as pullconn's are.

// RequestFinishedGroups is RequestFinished for a grouped layout: blockIDs
// holds one list of the rank's logical block ids per KV-cache group, each
// a suffix of the request in token order (a sliding-window group may list
// only the blocks its window touches), and tokens is the request's length
// the lists cover (vLLM's num_computed_tokens); decode's registration
// lists are aligned to it. The Params carry both (RemoteGroupBlockIDs,
// NumTokens; remote_block_ids as a list of lists and remote_num_tokens in
// JSON). With staging on, a grouped request is staged through decode's
// group image (staging.GroupDstImage) as a single-group one is through
// its image. withTokens does not apply:
// tokens is the count.
func (p *Producer) RequestFinishedGroups(requestID string, tokens int, blockIDs [][]int, opts ...requestOption) (Params, error) {
	o := p.engine.vllmOpts(applyOpts(opts))
	switch {
	case requestID == "" || len(requestID) > notif.MaxIDLen:
		return Params{}, invalidf("request id must be 1..%d bytes, got %d", notif.MaxIDLen, len(requestID))
	case groupids.Empty(blockIDs):
		return Params{}, invalidf("request %q has no blocks", requestID)
	case tokens < 1:
		return Params{}, invalidf("request %q: tokens is %d, want >= 1", requestID, tokens)
	}
	if err := groupids.Check(&p.cfg.Layout, "blockIDs", blockIDs); err != nil {
		return Params{}, invalidf("request %q: %v", requestID, err)
	}
	h := &hold{id: requestID, transferID: o.transferID, groups: groupids.Copy(blockIDs), tokens: tokens, finished: p.now()}
	tp := engine.Public.Params(p.engine.core, requestID, nil).(connector.TransferParams)
	tp.RemoteBlockIDs, tp.RemoteGroupBlockIDs = nil, groupids.Copy(blockIDs)
	return p.hold(h, tp)
}

// RegisterGroups is Register for a grouped layout: blockIDs holds one list
// of the rank's logical block ids per KV-cache group, each the suffix of
// the request still to fill (after a prefix hit, which may differ from
// group to group, and without a sliding window's blocks before the
// window), which PUSH_REG carries as they are. withTokens, when given, is
// the request's length the lists are aligned to (the prefill's tokens):
// decode then counts each group's prefix hit (Stats().PrefixHitBlocks), and
// refuses lists longer than that length's blocks.
func (c *Consumer) RegisterGroups(requestID string, prefill Prefill, blockIDs [][]int, opts ...requestOption) error {
	o := c.engine.vllmOpts(applyOpts(opts))
	if err := prefill.validate(); err != nil {
		return err
	}
	switch {
	case requestID == "" || len(requestID) > notif.MaxIDLen:
		return invalidf("request id must be 1..%d bytes, got %d", notif.MaxIDLen, len(requestID))
	}
	if err := groupids.Check(&c.cfg.Layout, "blockIDs", blockIDs); err != nil {
		return invalidf("request %q: %v", requestID, err)
	}
	if o.tokens != 0 {
		var err error
		if o.prefixHits, err = descriptors.PrefixHits(&c.cfg.Layout, o.tokens, blockIDs); err != nil {
			return invalidf("request %q: Tokens %d: %v", requestID, o.tokens, engine.Field(err))
		}
	}
	return c.register(requestID, prefill, groupids.Copy(blockIDs), o)
}

// mapGroups maps grouped hold h onto registration pr's lists in decode
// layout dst.
func (w *writer) mapGroups(t *descriptors.Transfer, pr *pendingReg, h *hold, dst *descriptors.Layout) error {
	_, err := descriptors.MapGroupsInto(t, &w.p.cfg.Layout, dst, descriptors.GroupRequest{
		Tokens: h.tokens, Src: h.groups, Dst: pr.reg.LocalBlockIDs})
	return err
}
