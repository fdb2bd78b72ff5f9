package descriptors

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// memory simulates the registered regions of several ranks of one side. Each
// simulated byte holds a provenance id instead of a value, so a check can say
// exactly which source byte landed where: id = 1 + rank<<48 | region<<32 |
// offset in region. Zero means never written.
type memory struct {
	ranks  []*Layout
	bytes  [][][]uint64 // [rank][region][offset]
	writes [][][]uint8  // write count per byte
}

func newMemory(ranks []*Layout, fill bool) *memory {
	m := &memory{ranks: ranks}
	for rk, l := range ranks {
		regs := make([][]uint64, len(l.Regions))
		ws := make([][]uint8, len(l.Regions))
		for r := range l.Regions {
			regs[r] = make([]uint64, l.RegionLenOf(r))
			ws[r] = make([]uint8, l.RegionLenOf(r))
			if fill {
				for i := range regs[r] {
					regs[r][i] = byteID(rk, r, uint64(i))
				}
			}
		}
		m.bytes = append(m.bytes, regs)
		m.writes = append(m.writes, ws)
	}
	return m
}

func byteID(rank, region int, off uint64) uint64 {
	return 1 + uint64(rank)<<48 | uint64(region)<<32 | off
}

// locate finds the region of rank that holds all of d, as NIXL would look up
// the registration that covers a descriptor.
func (m *memory) locate(rank int, d nixl.Desc) (region int, off uint64, err error) {
	l := m.ranks[rank]
	for r, reg := range l.Regions {
		n := l.RegionLenOf(r)
		if reg.DevID == d.DevID && d.Addr >= reg.Base && d.Addr-reg.Base <= n && d.Len <= n-(d.Addr-reg.Base) {
			return r, d.Addr - reg.Base, nil
		}
	}
	return 0, 0, fmt.Errorf("descriptor %+v lies in no single region of rank %d", d, rank)
}

// copyTransfer applies t from source rank srcRank of src to destination rank
// dstRank of m, checking registration coverage and pair lengths.
func copyTransfer(t Transfer, src *memory, srcRank int, dst *memory, dstRank int) error {
	if len(t.Src.Descs) != len(t.Dst.Descs) {
		return fmt.Errorf("list lengths differ: %d source, %d destination", len(t.Src.Descs), len(t.Dst.Descs))
	}
	if t.Src.Mem != src.ranks[srcRank].Mem || t.Dst.Mem != dst.ranks[dstRank].Mem {
		return fmt.Errorf("memory types %v/%v, want %v/%v", t.Src.Mem, t.Dst.Mem, src.ranks[srcRank].Mem, dst.ranks[dstRank].Mem)
	}
	var total uint64
	for i := range t.Src.Descs {
		s, d := t.Src.Descs[i], t.Dst.Descs[i]
		if s.Len != d.Len || s.Len == 0 {
			return fmt.Errorf("pair %d: lengths %d and %d", i, s.Len, d.Len)
		}
		sr, so, err := src.locate(srcRank, s)
		if err != nil {
			return fmt.Errorf("pair %d source: %w", i, err)
		}
		dr, do, err := dst.locate(dstRank, d)
		if err != nil {
			return fmt.Errorf("pair %d destination: %w", i, err)
		}
		copy(dst.bytes[dstRank][dr][do:do+d.Len], src.bytes[srcRank][sr][so:so+s.Len])
		w := dst.writes[dstRank][dr][do : do+d.Len]
		for j := range w {
			w[j]++
		}
		total += s.Len
	}
	if total != t.Bytes {
		return fmt.Errorf("Bytes %d, descriptors sum to %d", t.Bytes, total)
	}
	return nil
}

// expectDestination checks every byte of destination rank dstRank against
// the request, computed independently of the package: a byte of a moved
// token must hold the source byte of the same region, global head, request
// token and byte, written exactly once; any other byte must be untouched.
// moveUnits is the number of tokens moved after the cached prefix, rounded
// to whole units as Map moves them.
func expectDestination(srcRanks []*Layout, srcPick func(head int) int, dst *memory, dstRank int, req Request, movedTokens int) error {
	dl := dst.ranks[dstRank]
	hb := dl.HeadBytes
	firstTok := req.DstCached * dl.BlockSize
	for r := range dl.Regions {
		for k, b := range req.DstBlocks {
			for h := 0; h < dl.KVHeads; h++ {
				gh := dl.FirstHead() + h
				for tok := 0; tok < dl.BlockSize; tok++ {
					T := firstTok + k*dl.BlockSize + tok
					for i := 0; i < hb; i++ {
						off := tokenOff(dl, b, h, tok) + uint64(i)
						got, n := dst.bytes[dstRank][r][off], dst.writes[dstRank][r][off]
						if T >= firstTok+movedTokens {
							if n != 0 {
								return fmt.Errorf("region %d dst block %d head %d token %d byte %d: written %d times past the request", r, b, gh, tok, i, n)
							}
							continue
						}
						sRank := srcPick(gh)
						sl := srcRanks[sRank]
						sh := gh - sl.FirstHead()
						if sl.MLA {
							sh = h
						}
						sb := req.SrcBlocks[T/sl.BlockSize]
						st := T % sl.BlockSize
						want := byteID(sRank, r, tokenOff(sl, sb, sh, st)+uint64(i))
						if n != 1 || got != want {
							return fmt.Errorf("region %d dst block %d head %d token %d byte %d: got id %#x written %d times, want %#x once (src rank %d block %d token %d)",
								r, b, gh, tok, i, got, n, want, sRank, sb, st)
						}
					}
				}
			}
		}
	}
	// Blocks outside the request must be untouched.
	inReq := map[int]bool{}
	for _, b := range req.DstBlocks {
		inReq[b] = true
	}
	bl := dl.BlockLen()
	for r := range dl.Regions {
		for b := 0; b < dl.NumBlocks; b++ {
			if inReq[b] {
				continue
			}
			for _, n := range dst.writes[dstRank][r][uint64(b)*bl : uint64(b+1)*bl] {
				if n != 0 {
					return fmt.Errorf("region %d block %d is not in the request but was written", r, b)
				}
			}
		}
	}
	return nil
}

// tokenOff is the offset in a region of head h (counted from the rank's
// first head) of token tok of block b, in the layout's in-block order,
// computed from the definition rather than by the package.
func tokenOff(l *Layout, b, h, tok int) uint64 {
	hb := l.HeadBytes
	if l.Order == OrderNHD {
		return uint64(((b*l.BlockSize+tok)*l.KVHeads + h) * hb)
	}
	return uint64(((b*l.KVHeads+h)*l.BlockSize + tok) * hb)
}
