package staging

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// Seg is one copy of Len bytes from address Src to address Dst. It is an
// unnamed struct type, the same as connector.Seg, so that a Copier a user
// writes for package connector is one for this package too.
type Seg = struct {
	Src, Dst, Len uint64
}

// Copier copies segments within one memory space: the gather into a slot
// and the scatter out of it. Copy returns once every byte has been copied
// (or the error that stopped it); it must be safe for concurrent use.
type Copier interface {
	Copy(segs []Seg) error
}

// ProgressCopier is a copier that runs a function over and over while
// its copy is under way (the GPU copier, between polls of its stream): a
// connector that gathers one chunk while the chunks before it move keeps
// them progressing, and their completions going out, during the gather.
type ProgressCopier interface {
	CopyProgress(segs []Seg, progress func()) error
	CopyBlocksProgress(b BlockCopy, progress func()) error
}

// HostCopier copies host memory that nixl.Buffer allocated (the memory the
// loopback agent and DRAM layouts use) with Go's copy. An address outside
// such a buffer gives an error, never a fault.
type HostCopier struct{}

// Copy copies every segment in order.
func (HostCopier) Copy(segs []Seg) error {
	for i, s := range segs {
		if s.Len == 0 {
			continue
		}
		src, err := nixl.HostBytes(s.Src, s.Len)
		if err != nil {
			return fmt.Errorf("staging: segment %d: source %#x+%d: %w", i, s.Src, s.Len, err)
		}
		dst, err := nixl.HostBytes(s.Dst, s.Len)
		if err != nil {
			return fmt.Errorf("staging: segment %d: destination %#x+%d: %w", i, s.Dst, s.Len, err)
		}
		copy(dst, src)
	}
	return nil
}

// appendSeg appends s to segs, extending the last segment instead when s
// continues it on both sides.
func appendSeg(segs []Seg, s Seg) []Seg {
	if n := len(segs); n > 0 {
		last := &segs[n-1]
		if last.Src+last.Len == s.Src && last.Dst+last.Len == s.Dst {
			last.Len += s.Len
			return segs
		}
	}
	return append(segs, s)
}
