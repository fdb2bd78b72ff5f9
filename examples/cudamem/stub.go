//go:build !cuda

package cudamem

// Device is a CUDA device with its primary context; unavailable in this build.
type Device struct{}

// Count returns ErrUnavailable without the `cuda` build tag.
func Count() (int, error) { return 0, ErrUnavailable }

// Open returns ErrUnavailable without the `cuda` build tag.
func Open(ordinal int) (*Device, error) { return nil, ErrUnavailable }

// Ordinal returns -1 in this build.
func (d *Device) Ordinal() int { return -1 }

// Alloc returns ErrUnavailable without the `cuda` build tag.
func (d *Device) Alloc(n uint64) (uint64, error) { return 0, ErrUnavailable }

// Free returns ErrUnavailable without the `cuda` build tag.
func (d *Device) Free(ptr uint64) error { return ErrUnavailable }

// CopyHtoD returns ErrUnavailable without the `cuda` build tag.
func (d *Device) CopyHtoD(dst uint64, src []byte) error { return ErrUnavailable }

// CopyDtoH returns ErrUnavailable without the `cuda` build tag.
func (d *Device) CopyDtoH(dst []byte, src uint64) error { return ErrUnavailable }

// CopyDtoD returns ErrUnavailable without the `cuda` build tag.
func (d *Device) CopyDtoD(dst, src, n uint64) error { return ErrUnavailable }

// Memset returns ErrUnavailable without the `cuda` build tag.
func (d *Device) Memset(ptr uint64, v byte, n uint64) error { return ErrUnavailable }

// Sync returns ErrUnavailable without the `cuda` build tag.
func (d *Device) Sync() error { return ErrUnavailable }

// CopyPeer returns ErrUnavailable without the `cuda` build tag.
func CopyPeer(dst uint64, dstDev *Device, src uint64, srcDev *Device, n uint64) error {
	return ErrUnavailable
}

// Close returns nil in this build.
func (d *Device) Close() error { return nil }

// SetCurrent returns ErrUnavailable without the `cuda` build tag.
func (d *Device) SetCurrent() error { return ErrUnavailable }

// CanAccessPeer returns ErrUnavailable without the `cuda` build tag.
func CanAccessPeer(a, b int) (bool, error) { return false, ErrUnavailable }

// EnablePeerAccess returns ErrUnavailable without the `cuda` build tag.
func (d *Device) EnablePeerAccess(peer *Device) error { return ErrUnavailable }

// MemsetAsync returns ErrUnavailable without the `cuda` build tag.
func (d *Device) MemsetAsync(ptr uint64, v byte, n uint64) error { return ErrUnavailable }
