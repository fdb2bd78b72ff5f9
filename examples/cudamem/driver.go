package cudamem

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/internal/cuda"
)

// wrap names the package in err; a driver that cannot be loaded, or a
// build without the `cuda` tag, gives an error matching ErrUnavailable.
func wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cuda.ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	default:
		return fmt.Errorf("cudamem: %w", err)
	}
}

var errNotOpen = errors.New("cudamem: device not open")

// Device is a CUDA device with its retained primary context. Its methods lock
// the calling goroutine to its OS thread and make the context current around
// every driver call, since the context binding is per thread.
type Device struct {
	ordinal int
	ctx     *cuda.Context // nil once closed
}

// Count returns the number of CUDA devices.
func Count() (int, error) {
	n, err := cuda.DeviceCount()
	return n, wrap(err)
}

// Open retains the primary context of device ordinal.
func Open(ordinal int) (*Device, error) {
	ctx, err := cuda.RetainPrimary(ordinal)
	if err != nil {
		return nil, wrap(err)
	}
	return &Device{ordinal: ordinal, ctx: ctx}, nil
}

// Ordinal returns the device's ordinal, the DevID of its VRAM descriptors.
func (d *Device) Ordinal() int { return d.ordinal }

// do runs f with the device's context current on a locked OS thread.
func (d *Device) do(f func() error) error {
	if d.ctx == nil {
		return errNotOpen
	}
	return wrap(d.ctx.Do(f))
}

// Alloc allocates n bytes of device memory and returns its device address.
func (d *Device) Alloc(n uint64) (uint64, error) {
	var p uint64
	err := d.do(func() (err error) {
		p, err = cuda.MemAlloc(n)
		return err
	})
	return p, err
}

// Free frees memory from Alloc.
func (d *Device) Free(ptr uint64) error {
	return d.do(func() error { return cuda.MemFree(ptr) })
}

// CopyHtoD copies src to device address dst (synchronous).
func (d *Device) CopyHtoD(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.do(func() error { return cuda.MemcpyHtoD(dst, src) })
}

// CopyDtoH copies len(dst) bytes from device address src (synchronous).
func (d *Device) CopyDtoH(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return d.do(func() error { return cuda.MemcpyDtoH(dst, src) })
}

// CopyDtoD copies n bytes between device addresses of this device and waits
// for the copy to finish.
func (d *Device) CopyDtoD(dst, src, n uint64) error {
	return d.do(func() error {
		if err := cuda.MemcpyDtoD(dst, src, n); err != nil {
			return err
		}
		return cuda.CtxSynchronize()
	})
}

// Memset sets n bytes at ptr to v and waits for it.
func (d *Device) Memset(ptr uint64, v byte, n uint64) error {
	return d.do(func() error {
		if err := cuda.MemsetD8(ptr, v, n); err != nil {
			return err
		}
		return cuda.CtxSynchronize()
	})
}

// MemsetAsync sets n bytes at ptr to v without waiting for it: the driver
// orders it before later work on the default stream, and Sync waits for it.
// Zeroing many ranges then costs one wait instead of one each.
func (d *Device) MemsetAsync(ptr uint64, v byte, n uint64) error {
	return d.do(func() error { return cuda.MemsetD8(ptr, v, n) })
}

// Sync waits for all work on the device's context.
func (d *Device) Sync() error { return d.do(cuda.CtxSynchronize) }

// CopyPeer copies n bytes from src on srcDev to dst on dstDev and waits for it.
func CopyPeer(dst uint64, dstDev *Device, src uint64, srcDev *Device, n uint64) error {
	if srcDev.ctx == nil {
		return errNotOpen
	}
	return dstDev.do(func() error {
		if err := cuda.MemcpyPeer(dst, dstDev.ctx, src, srcDev.ctx, n); err != nil {
			return err
		}
		return cuda.CtxSynchronize()
	})
}

// SetCurrent makes the device's primary context current on the calling OS
// thread and leaves it so. Native code that issues CUDA work without making a
// context current itself (UCX on a thread Go picked) needs one there; callers
// lock the goroutine to its thread first so the binding reaches the thread
// they prepared.
func (d *Device) SetCurrent() error {
	if d.ctx == nil {
		return errNotOpen
	}
	return wrap(d.ctx.SetCurrent())
}

// CanAccessPeer reports whether device a can address device b's memory
// directly (NVLink or PCIe peer to peer).
func CanAccessPeer(a, b int) (bool, error) {
	can, err := cuda.CanAccessPeer(a, b)
	return can, wrap(err)
}

// EnablePeerAccess lets kernels and copies issued in d's context address
// peer's memory directly, so cuMemcpyPeer between them is a device-to-device
// copy rather than one staged through the host. Enabling it twice is not an
// error.
func (d *Device) EnablePeerAccess(peer *Device) error {
	if d.ctx == nil || peer.ctx == nil {
		return errNotOpen
	}
	if err := d.ctx.EnablePeerAccess(peer.ctx); err != nil && !errors.Is(err, cuda.ErrorPeerAccessAlreadyEnabled) {
		return wrap(err)
	}
	return nil
}

// Close releases the primary context retained by Open.
func (d *Device) Close() error {
	if d.ctx == nil {
		return nil
	}
	ctx := d.ctx
	d.ctx = nil
	return wrap(ctx.Release())
}
