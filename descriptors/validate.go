package descriptors

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/gonixl/gonixl/nixl"
)

// maxDescs bounds NumRegions*NumBlocks so that descriptor ids and the
// per-block list fit comfortably in memory and in an int32 index.
const maxDescs = 1 << 31

// maxField and maxTP bound the geometry fields far above any real model so
// that products of two of them, and of a block list length, fit in an int.
const (
	maxField = 1 << 30
	maxTP    = 1 << 16
)

// MaxLayers bounds NumLayers in a layout that Validate accepts: far above
// any model (hundreds of layers), low enough that a hostile handshake cannot
// make a peer check millions of regions.
const MaxLayers = 1 << 14

// Validate reports the first field that makes the layout unusable; the error
// matches ErrInvalid and names the field and its value. Besides the checks
// every mapping call repeats, it verifies that regions on one device do not
// overlap (sorted by device and base, O(regions log regions)); it is meant
// for handshake time, not the transfer path.
func (l *Layout) Validate() error {
	if err := l.check(); err != nil {
		return err
	}
	if l.NumLayers > MaxLayers {
		return invalidf("NumLayers %d is above the limit of %d", l.NumLayers, MaxLayers)
	}
	lens := l.regionLens()
	order := make([]int, len(l.Regions))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := l.Regions[i], l.Regions[j]
		if c := cmp.Compare(a.DevID, b.DevID); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Base, b.Base); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	// Sorted by start, regions overlap only if some pair of neighbours
	// does: if a region overlaps a later one, it overlaps the next.
	for k := 1; k < len(order); k++ {
		i, j := order[k-1], order[k]
		a, b := l.Regions[i], l.Regions[j]
		if a.DevID == b.DevID && b.Base < a.Base+lens[i] {
			n := lens[i]
			if j < i {
				i, j, a, b = j, i, b, a
			}
			if len(l.Groups) > 0 {
				return invalidf("Regions[%d] (base %#x) and Regions[%d] (base %#x) overlap on device %d (region lengths %d and %d)",
					i, a.Base, j, b.Base, a.DevID, lens[i], lens[j])
			}
			return invalidf("Regions[%d] (base %#x) and Regions[%d] (base %#x) overlap on device %d (region length %d)",
				i, a.Base, j, b.Base, a.DevID, n)
		}
	}
	return nil
}

// check is the part of Validate that the mapping functions run on every call:
// it guarantees that no index or address computation can overflow or go out
// of range.
func (l *Layout) check() error {
	if l == nil {
		return invalidf("layout is nil")
	}
	switch {
	case l.Mem < nixl.DRAM || l.Mem > nixl.FILE:
		return invalidf("Mem %v is not a NIXL memory type", l.Mem)
	case l.NumLayers <= 0:
		return invalidf("NumLayers %d must be positive", l.NumLayers)
	case l.NumBlocks <= 0:
		return invalidf("NumBlocks %d must be positive", l.NumBlocks)
	case l.BlockSize <= 0:
		return invalidf("BlockSize %d must be positive", l.BlockSize)
	case l.KVHeads <= 0:
		return invalidf("KVHeads %d must be positive", l.KVHeads)
	case l.HeadBytes <= 0:
		return invalidf("HeadBytes %d must be positive", l.HeadBytes)
	case l.DType == "":
		return invalidf("DType is empty")
	case l.MLA && l.KVPacked:
		return invalidf("MLA and KVPacked are both set: an MLA layer has one latent cache, no K and V to pack")
	case l.TPSize <= 0:
		return invalidf("TPSize %d must be positive", l.TPSize)
	case l.TPRank < 0 || l.TPRank >= l.TPSize:
		return invalidf("TPRank %d out of range [0, %d)", l.TPRank, l.TPSize)
	case l.ModelKVHeads < 0:
		return invalidf("ModelKVHeads %d must not be negative", l.ModelKVHeads)
	case l.NumLayers > maxDescs/2:
		return invalidf("NumLayers %d too large", l.NumLayers)
	case l.BlockSize > maxField:
		return invalidf("BlockSize %d too large (max %d)", l.BlockSize, maxField)
	case l.KVHeads > maxField:
		return invalidf("KVHeads %d too large (max %d)", l.KVHeads, maxField)
	case l.HeadBytes > maxField:
		return invalidf("HeadBytes %d too large (max %d)", l.HeadBytes, maxField)
	case l.ModelKVHeads > maxField:
		return invalidf("ModelKVHeads %d too large (max %d)", l.ModelKVHeads, maxField)
	case l.TPSize > maxTP:
		return invalidf("TPSize %d too large (max %d)", l.TPSize, maxTP)
	}
	if err := l.checkOrder(); err != nil {
		return err
	}
	if err := l.checkStage(); err != nil {
		return err
	}
	if len(l.Groups) > 0 {
		return l.checkGrouped()
	}
	if len(l.Regions) != l.NumRegions() {
		kind := "2 per layer (K and V)"
		switch {
		case l.MLA:
			kind = "1 per layer (MLA)"
		case l.KVPacked:
			kind = "1 per layer (K and V packed)"
		}
		return invalidf("len(Regions) %d, want %d: %s for %d layers", len(l.Regions), l.NumRegions(), kind, l.NumLayers)
	}
	if l.NumBlocks > maxDescs/l.NumRegions() {
		return invalidf("NumBlocks %d x %d regions exceeds %d descriptors", l.NumBlocks, l.NumRegions(), maxDescs)
	}
	if err := l.checkHeads(); err != nil {
		return err
	}
	hi, per := bits.Mul64(uint64(l.BlockSize), uint64(l.KVHeads))
	if hi == 0 {
		hi, per = bits.Mul64(per, uint64(l.HeadBytes))
	}
	if hi == 0 {
		hi, per = bits.Mul64(per, uint64(l.NumBlocks))
	}
	if hi != 0 {
		return invalidf("region length NumBlocks %d x BlockSize %d x KVHeads %d x HeadBytes %d overflows 64 bits",
			l.NumBlocks, l.BlockSize, l.KVHeads, l.HeadBytes)
	}
	for i, r := range l.Regions {
		if _, carry := bits.Add64(r.Base, per, 0); carry != 0 {
			return invalidf("Regions[%d] base %#x + length %d overflows 64 bits", i, r.Base, per)
		}
	}
	return nil
}

// checkHeads verifies that TPSize splits the model's KV heads the way vLLM
// does: evenly, or by replicating single heads when there are more ranks
// than heads.
func (l *Layout) checkHeads() error {
	if l.MLA {
		return nil
	}
	if l.ModelKVHeads > 0 && l.ModelKVHeads < l.TPSize {
		if l.KVHeads != 1 {
			return invalidf("KVHeads %d with ModelKVHeads %d < TPSize %d: each rank must hold 1 replicated head",
				l.KVHeads, l.ModelKVHeads, l.TPSize)
		}
		if l.TPSize%l.ModelKVHeads != 0 {
			return invalidf("TPSize %d is not a multiple of ModelKVHeads %d", l.TPSize, l.ModelKVHeads)
		}
		return nil
	}
	if l.ModelKVHeads > 0 && l.ModelKVHeads != l.KVHeads*l.TPSize {
		return invalidf("ModelKVHeads %d != KVHeads %d x TPSize %d", l.ModelKVHeads, l.KVHeads, l.TPSize)
	}
	return nil
}

// checkGrouped is the rest of check for a layout with Groups: the heads,
// the groups, and every region's end inside the address space.
func (l *Layout) checkGrouped() error {
	if len(l.Regions) > MaxRegions {
		return invalidf("len(Regions) %d is above the limit of %d", len(l.Regions), MaxRegions)
	}
	if err := l.checkHeads(); err != nil {
		return err
	}
	lens, err := l.checkGroups()
	if err != nil {
		return err
	}
	for i, r := range l.Regions {
		if _, carry := bits.Add64(r.Base, lens[i], 0); carry != 0 {
			return invalidf("Regions[%d] base %#x + length %d overflows 64 bits", i, r.Base, lens[i])
		}
	}
	return nil
}
