package gpucopy

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/gonixl/gonixl/internal/cuda"
	"github.com/gonixl/gonixl/internal/staging"
)

//go:embed segcopy.ptx
var ptx string

// wrap names the package in err; a driver that cannot be loaded, or a
// build without the `cuda` tag, gives an error matching ErrUnavailable.
func wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cuda.ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	default:
		return fmt.Errorf("gpucopy: %w", err)
	}
}

// maxGrid bounds the thread blocks of one launch; the kernel strides over
// longer lists.
const maxGrid = 1 << 20

// segBytes is the size of one segment record (three 64-bit words).
const segBytes = 24

// pieceBytes is the longest piece one thread block copies: longer segments
// are cut, so that a few large runs still use every multiprocessor.
const pieceBytes = 64 << 10

// PTXEnv names a PTX file that New loads instead of the embedded one, to
// try a change of segcopy.cu without rebuilding.
const PTXEnv = "GONIXL_GPUCOPY_PTX"

// Copier runs the gather/scatter kernel on one GPU, on its own stream. It
// is safe for concurrent use: copies run one at a time.
type Copier struct {
	mu       sync.Mutex
	ctx      *cuda.Context
	mod      cuda.Module
	fn       cuda.Function
	fnBlocks cuda.Function // the block kernel; zero when the PTX has none
	stream   cuda.Stream
	host     *cuda.HostMem // pinned table: C memory that Go writes
	dev      uint64        // device table
	cap      int           // records both tables hold
	threads  int           // threads per block: the kernel's launch bounds
	closed   bool
	broken   bool // a kernel outlived KernelTimeout
}

// KernelTimeout bounds how long a copy with progress waits for its kernel
// (a gather of gigabytes takes milliseconds).
const KernelTimeout = 30 * time.Second

// New loads the kernel on device ordinal (the DevID of its VRAM
// descriptors) and creates the copier's stream. The kernel is the
// embedded PTX, or the file PTXEnv names when set. Without a driver, or
// in a build without the `cuda` tag, its error matches ErrUnavailable.
func New(device int) (*Copier, error) {
	if path := os.Getenv(PTXEnv); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("gpucopy: %s: %w", PTXEnv, err)
		}
		return NewWithPTX(device, string(b))
	}
	return NewWithPTX(device, ptx)
}

// NewWithPTX is New with the kernel's PTX given (for trying variants).
func NewWithPTX(device int, ptx string) (*Copier, error) {
	ctx, err := cuda.RetainPrimary(device)
	if err != nil {
		return nil, fmt.Errorf("%w (device %d)", wrap(err), device)
	}
	c := &Copier{ctx: ctx}
	err = c.do(func() (err error) {
		if c.mod, err = cuda.ModuleLoadData(ptx); err != nil {
			return err
		}
		if c.fn, err = c.mod.Function("gonixl_copy_segments"); err != nil {
			return err
		}
		// The block kernel is optional: an older PTX has only the segment one.
		if c.fnBlocks, err = c.mod.Function("gonixl_copy_blocks"); err != nil {
			c.fnBlocks = cuda.Function{}
		}
		n, err := c.fn.Attribute(cuda.FuncAttributeMaxThreadsPerBlock)
		if err != nil {
			return err
		}
		c.threads = min(n, 1024)
		c.stream, err = cuda.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	if err != nil {
		_ = c.release()
		return nil, err
	}
	return c, nil
}

// run runs one copy f: one at a time, with the context current, refused
// once the copier is closed or a kernel outlived KernelTimeout.
func (c *Copier) run(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("gpucopy: copier closed")
	}
	if c.broken {
		return errors.New("gpucopy: copier unusable: a kernel outlived its timeout")
	}
	if c.ctx == nil {
		return fmt.Errorf("%w: the Copier was not made by New", ErrUnavailable)
	}
	return c.do(f)
}

// do runs f with the copier's context current on a locked OS thread; f's
// errors are named "gpucopy: " here.
func (c *Copier) do(f func() error) error { return wrap(c.ctx.Do(f)) }

// grow makes the tables hold n records.
func (c *Copier) grow(n int) error {
	if n <= c.cap {
		return nil
	}
	want := max(n, 2*c.cap, 1024)
	if c.host != nil {
		_ = c.host.Free()
		c.host = nil
	}
	if c.dev != 0 {
		_ = cuda.MemFree(c.dev)
		c.dev = 0
	}
	c.cap = 0
	h, err := cuda.MemAllocHost(want * segBytes)
	if err != nil {
		return err
	}
	c.host = h
	if c.dev, err = cuda.MemAlloc(uint64(want * segBytes)); err != nil {
		return err
	}
	c.cap = want
	return nil
}

// Copy copies every segment (device addresses of this GPU) and returns
// once the kernel has finished. Segments must not overlap one another.
func (c *Copier) Copy(segs []staging.Seg) error { return c.CopyProgress(segs, nil) }

// CopyProgress is Copy calling progress (when not nil) over and over
// while the kernel runs, with no lock of the caller's held by the copier
// but its own: the caller's transfers keep moving during a long gather.
func (c *Copier) CopyProgress(segs []staging.Seg, progress func()) error {
	if len(segs) == 0 {
		return nil
	}
	n := 0
	for _, s := range segs {
		n += int((s.Len + pieceBytes - 1) / pieceBytes)
	}
	if n > 1<<31 {
		return fmt.Errorf("gpucopy: %d pieces in one copy, at most %d", n, 1<<31)
	}
	return c.run(func() error {
		if err := c.grow(n); err != nil {
			return err
		}
		// The table is C memory: Go writes the records, the driver reads them.
		tab := unsafe.Slice((*uint64)(c.host.Ptr()), 3*n)
		i := 0
		for _, s := range segs {
			for off := uint64(0); off < s.Len; off += pieceBytes {
				tab[3*i], tab[3*i+1], tab[3*i+2] = s.Src+off, s.Dst+off, min(pieceBytes, s.Len-off)
				i++
			}
		}
		grid := min(i, maxGrid)
		if i == 0 {
			return nil
		}
		const op = "kernel gonixl_copy_segments"
		if err := c.launch(op, i*segBytes, progress, c.fn, uint32(grid),
			cuda.ArgU64(c.dev), cuda.ArgU32(uint32(i))); err != nil {
			return err
		}
		return c.wait(op, progress)
	})
}

// launch uploads the first bytes of the host table to the device table and
// launches fn over grid blocks on the copier's stream, and waits for the
// kernel when there is no progress to call.
func (c *Copier) launch(op string, bytes int, progress func(), fn cuda.Function, grid uint32, args ...cuda.KernelArg) error {
	if err := cuda.MemcpyHtoDAsync(c.dev, c.host, bytes, c.stream); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := cuda.LaunchKernel(fn, grid, uint32(c.threads), 0, c.stream, args...); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if progress == nil {
		if err := c.stream.Synchronize(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}

// wait polls the stream until its kernel ended, calling progress between
// polls; with no progress the launch already waited. The context is made
// current again after each call, which may run other CUDA users' code.
func (c *Copier) wait(op string, progress func()) error {
	if progress == nil {
		return nil
	}
	deadline := time.Now().Add(KernelTimeout)
	for {
		done, err := c.stream.Query()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			// The kernel may still write: nothing may use the copier (or
			// hand its memory to another copy) again.
			c.broken = true
			return fmt.Errorf("%s still running after %v; the copier is unusable", op, KernelTimeout)
		}
		progress()
		if err := c.ctx.SetCurrent(); err != nil {
			return err
		}
	}
}

// CopyBlocks copies by block ids (see staging.BlockCopy) with the block
// kernel, which computes the addresses on the GPU: only the bases and ids
// are uploaded. Without that kernel in the PTX it copies the same bytes
// by segments.
func (c *Copier) CopyBlocks(b staging.BlockCopy) error { return c.CopyBlocksProgress(b, nil) }

// CopyBlocksProgress is CopyBlocks calling progress as CopyProgress does.
func (c *Copier) CopyBlocksProgress(b staging.BlockCopy, progress func()) error {
	items := uint64(len(b.Bases)) * uint64(len(b.Blocks))
	if items == 0 || b.Len == 0 {
		return nil
	}
	if c.fnBlocks.IsZero() || len(b.Bases) > 1<<20 || len(b.Blocks) > 1<<30 || items > 1<<40 {
		return c.CopyProgress(b.Segs(nil), progress)
	}
	for _, id := range b.Blocks {
		if id < 0 || id > 1<<31-1 {
			return fmt.Errorf("gpucopy: block id %d out of range", id)
		}
	}
	var toSlot int32
	if b.ToSlot {
		toSlot = 1
	}
	// Table: the bases (8 bytes each), then the ids (4 bytes each), in
	// records of 24 bytes as grow counts them.
	bytes := 8*len(b.Bases) + 4*len(b.Blocks)
	return c.run(func() error {
		if err := c.grow((bytes + segBytes - 1) / segBytes); err != nil {
			return err
		}
		bases := unsafe.Slice((*uint64)(c.host.Ptr()), len(b.Bases))
		copy(bases, b.Bases)
		ids := unsafe.Slice((*int32)(unsafe.Add(c.host.Ptr(), 8*len(b.Bases))), len(b.Blocks))
		for i, id := range b.Blocks {
			ids[i] = int32(id)
		}
		grid := uint32(min(items, maxGrid))
		const op = "kernel gonixl_copy_blocks"
		if err := c.launch(op, bytes, progress, c.fnBlocks, grid,
			cuda.ArgU64(c.dev), cuda.ArgU64(c.dev+8*uint64(len(b.Bases))),
			cuda.ArgU32(uint32(len(b.Bases))), cuda.ArgU32(uint32(len(b.Blocks))),
			cuda.ArgU64(b.BlockLen), cuda.ArgU64(b.Off), cuda.ArgU64(b.Len),
			cuda.ArgU64(b.Slot), cuda.ArgU64(b.SlotStride), cuda.ArgI32(toSlot)); err != nil {
			return err
		}
		return c.wait(op, progress)
	})
}

// HasBlockKernel reports whether the loaded PTX has the block kernel.
func (c *Copier) HasBlockKernel() bool { return c != nil && !c.fnBlocks.IsZero() }

// Close frees the copier's stream, tables and module and releases the
// context. It is idempotent; Copy after Close returns an error.
func (c *Copier) Close() error {
	if c == nil || c.ctx == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.release()
}

func (c *Copier) release() error {
	var errs []error
	_ = c.do(func() error {
		if !c.stream.IsZero() {
			errs = append(errs, c.stream.Destroy())
		}
		if c.host != nil {
			errs = append(errs, c.host.Free())
		}
		if c.dev != 0 {
			errs = append(errs, cuda.MemFree(c.dev))
		}
		if !c.mod.IsZero() {
			errs = append(errs, c.mod.Unload())
		}
		return nil
	})
	errs = append(errs, c.ctx.Release())
	return wrap(errors.Join(errs...))
}

// EmbeddedPTX returns the kernel's PTX that New loads by default.
func EmbeddedPTX() string { return ptx }
