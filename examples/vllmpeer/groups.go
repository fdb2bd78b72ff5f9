package vllmpeer

import (
	"fmt"
	"slices"
)

// A model of several KV-cache groups, as vLLM's hybrid KV-cache manager
// holds a sliding-window model: each layer's region belongs to one group
// (region_group_ids), and a request's block ids come one list per group,
// each list ending with the block of the request's last token (a
// sliding-window group lists only the blocks holding its window; vLLM
// clips the rest, get_exchange_clipped_blocks in nixl/pull_scheduler.py at
// 0050936b22adda2ef0197fa3bb2551fe6c5437dc).

// validGroups checks Config.Groups: nil, or one group index per layer,
// the indexes 0..n-1 each used.
func validGroups(groups []int, layers int) error {
	if groups == nil {
		return nil
	}
	if len(groups) != layers {
		return fmt.Errorf("vllmpeer: Config.Groups has %d entries, the model %d layers", len(groups), layers)
	}
	n := slices.Max(groups) + 1
	for i, g := range groups {
		if g < 0 {
			return fmt.Errorf("vllmpeer: Config.Groups[%d] is %d: the peer plays no shared regions", i, g)
		}
	}
	for g := range n {
		if !slices.Contains(groups, g) {
			return fmt.Errorf("vllmpeer: Config.Groups names no layer of group %d", g)
		}
	}
	return nil
}

// numGroups returns how many KV-cache groups the peer's model has.
func (p *Peer) numGroups() int {
	if p.cfg.Groups == nil {
		return 1
	}
	return slices.Max(p.cfg.Groups) + 1
}

// layerGroup returns layer's group.
func layerGroup(groups []int, layer int) int {
	if groups == nil {
		return 0
	}
	return groups[layer]
}

// suffixFirst is the request's block index of the first block of a list of
// n blocks that ends with the block of the last of tokens tokens.
func suffixFirst(tokens, blockSize, n int) int { return (tokens-1)/blockSize - n + 1 }

// PrefillGroups is Prefill for a model of several KV-cache groups
// (Config.Groups): blocks holds one list per group, each ending with the
// block of the prompt's last token; every layer's blocks of its group are
// filled with the prompt's KV (docs/kvfill.md) at their tokens, and the
// params carry the lists as vLLM's remote_block_ids.
func (p *Peer) PrefillGroups(reqID string, tokens []int, blocks [][]int) (Params, error) {
	if err := p.checkGroupBlocks(len(tokens), blocks); err != nil {
		return Params{}, err
	}
	ph := PrefixHashes(tokens)
	for _, k := range p.kv {
		for layer := range p.cfg.Model.Layers {
			list := blocks[layerGroup(p.cfg.Groups, layer)]
			k.fillLayer(layer, list, suffixFirst(len(tokens), p.cfg.Model.BlockSize, len(list)), ph)
		}
	}
	var all []int
	for _, l := range blocks {
		all = append(all, l...)
	}
	prm, err := p.Hold(reqID, all, len(tokens))
	if err != nil {
		return Params{}, err
	}
	prm.RemoteBlockIDs = make([][]int, len(blocks))
	for g, l := range blocks {
		prm.RemoteBlockIDs[g] = append([]int{}, l...)
	}
	return prm, nil
}

func (p *Peer) checkGroupBlocks(tokens int, blocks [][]int) error {
	if len(blocks) != p.numGroups() {
		return fmt.Errorf("vllmpeer: %d block-id lists, the model has %d KV-cache groups", len(blocks), p.numGroups())
	}
	for g, l := range blocks {
		if err := p.kv[0].checkBlocks(l); err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		if suffixFirst(tokens, p.cfg.Model.BlockSize, len(l)) < 0 {
			return fmt.Errorf("vllmpeer: group %d lists %d blocks, more than %d tokens fill", g, len(l), tokens)
		}
	}
	return nil
}

// CheckKVGroups is CheckKV for a model of several KV-cache groups: each
// layer's blocks are the list of its group (groups: Config.Groups), each
// list ending with the block of the prompt's last token (a decode's list
// leaves out its prefix hit and, for a sliding window, the blocks before
// its window).
func CheckKVGroups(mem []byte, m Model, tp, rank int, tokens []int, groups []int, blocks [][]int) (Check, error) {
	v, err := newView(m, tp, rank, mem)
	if err != nil {
		return Check{}, err
	}
	if err := validGroups(groups, m.Layers); err != nil {
		return Check{}, err
	}
	ph := PrefixHashes(tokens)
	var c Check
	for layer := range m.Layers {
		g := layerGroup(groups, layer)
		if g >= len(blocks) {
			return Check{}, fmt.Errorf("vllmpeer: layer %d is in group %d, %d block-id lists given", layer, g, len(blocks))
		}
		list := blocks[g]
		if err := v.checkBlocks(list); err != nil {
			return Check{}, err
		}
		lc := v.checkLayerFrom(layer, list, suffixFirst(len(tokens), m.BlockSize, len(list)), ph)
		c.OKBytes += lc.OKBytes
		c.BadBytes += lc.BadBytes
		if c.First == "" {
			c.First = lc.First
		}
	}
	return c, nil
}
