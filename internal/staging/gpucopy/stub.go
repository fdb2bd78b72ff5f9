//go:build !cuda

package gpucopy

import (
	"fmt"

	"github.com/gonixl/gonixl/internal/staging"
)

// Copier copies segments of GPU memory; unavailable in this build.
type Copier struct{}

// New returns ErrUnavailable without the `cuda` build tag.
func New(device int) (*Copier, error) {
	return nil, fmt.Errorf("%w: built without the cuda tag (device %d)", ErrUnavailable, device)
}

// Copy returns ErrUnavailable without the `cuda` build tag.
func (c *Copier) Copy(segs []staging.Seg) error { return ErrUnavailable }

// CopyProgress returns ErrUnavailable without the `cuda` build tag.
func (c *Copier) CopyProgress(segs []staging.Seg, progress func()) error { return ErrUnavailable }

// CopyBlocksProgress returns ErrUnavailable without the `cuda` build tag.
func (c *Copier) CopyBlocksProgress(b staging.BlockCopy, progress func()) error {
	return ErrUnavailable
}

// Close does nothing in this build.
func (c *Copier) Close() error { return nil }

// NewWithPTX returns ErrUnavailable without the `cuda` build tag.
func NewWithPTX(device int, ptx string) (*Copier, error) { return New(device) }

// EmbeddedPTX returns "" without the `cuda` build tag.
func EmbeddedPTX() string { return "" }

// CopyBlocks returns ErrUnavailable without the `cuda` build tag.
func (c *Copier) CopyBlocks(b staging.BlockCopy) error { return ErrUnavailable }

// HasBlockKernel reports false without the `cuda` build tag.
func (c *Copier) HasBlockKernel() bool { return false }
