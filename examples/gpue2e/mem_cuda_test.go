//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/gonixl/gonixl/examples/cudamem"
	"github.com/gonixl/gonixl/nixl"
)

// memory is where a test's buffers live: VRAM of one GPU (the point of these
// tests), or host memory, which runs the same harness on a machine without a
// GPU (GONIXL_E2E_MEM=dram) to check it before spending device time.
type memory interface {
	mem() nixl.MemType
	devID() uint64
	alloc(n uint64) (uint64, error)
	free(addr uint64) error
	write(addr uint64, src []byte) error
	read(dst []byte, addr uint64) error
	set(addr uint64, v byte, n uint64) error
	// zero clears every span and waits once for all of them.
	zero(spans []span) error
	// copy is the yardstick: the platform's own copy (cuMemcpyDtoD, memmove).
	copy(dst, src, n uint64) error
	// current makes native code on the calling OS thread address this
	// memory (a current CUDA context); the caller locks the thread.
	current() error
	close() error
}

// useDRAM reports whether the harness runs on host memory.
func useDRAM() bool { return os.Getenv("GONIXL_E2E_MEM") == "dram" }

// envInt reads an integer environment variable, def when unset.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// deviceCount returns how many devices the harness can use: the CUDA device
// count, or 2 host "devices" with DRAM.
func deviceCount() int {
	if useDRAM() {
		return 2
	}
	n, err := cudamem.Count()
	if err != nil {
		return 0
	}
	return n
}

func openMemory(dev int) (memory, error) {
	if useDRAM() {
		return &hostMem{bufs: map[uint64]*nixl.Buffer{}}, nil
	}
	d, err := cudamem.Open(dev)
	if err != nil {
		return nil, err
	}
	return &gpuMem{d: d}, nil
}

type gpuMem struct{ d *cudamem.Device }

func (g *gpuMem) mem() nixl.MemType                    { return nixl.VRAM }
func (g *gpuMem) devID() uint64                        { return uint64(g.d.Ordinal()) }
func (g *gpuMem) alloc(n uint64) (uint64, error)       { return g.d.Alloc(n) }
func (g *gpuMem) free(a uint64) error                  { return g.d.Free(a) }
func (g *gpuMem) write(a uint64, src []byte) error     { return g.d.CopyHtoD(a, src) }
func (g *gpuMem) read(dst []byte, a uint64) error      { return g.d.CopyDtoH(dst, a) }
func (g *gpuMem) set(a uint64, v byte, n uint64) error { return g.d.Memset(a, v, n) }
func (g *gpuMem) zero(spans []span) error {
	for _, s := range spans {
		if err := g.d.MemsetAsync(s.Addr, 0, s.Len); err != nil {
			return err
		}
	}
	return g.d.Sync()
}
func (g *gpuMem) copy(dst, src, n uint64) error { return g.d.CopyDtoD(dst, src, n) }
func (g *gpuMem) current() error                { return g.d.SetCurrent() }
func (g *gpuMem) close() error                  { return g.d.Close() }

type hostMem struct {
	mu   sync.Mutex
	bufs map[uint64]*nixl.Buffer
}

func (h *hostMem) mem() nixl.MemType { return nixl.DRAM }
func (h *hostMem) devID() uint64     { return 0 }
func (h *hostMem) alloc(n uint64) (uint64, error) {
	b, err := nixl.AllocBuffer(int(n))
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.bufs[b.Addr()] = b
	h.mu.Unlock()
	return b.Addr(), nil
}
func (h *hostMem) free(a uint64) error {
	h.mu.Lock()
	b := h.bufs[a]
	delete(h.bufs, a)
	h.mu.Unlock()
	if b == nil {
		return fmt.Errorf("host buffer %#x was not allocated here", a)
	}
	return b.Free()
}
func (h *hostMem) bytes(a, n uint64) ([]byte, error) { return nixl.HostBytes(a, n) }
func (h *hostMem) write(a uint64, src []byte) error {
	m, err := h.bytes(a, uint64(len(src)))
	if err == nil {
		copy(m, src)
	}
	return err
}
func (h *hostMem) read(dst []byte, a uint64) error {
	m, err := h.bytes(a, uint64(len(dst)))
	if err == nil {
		copy(dst, m)
	}
	return err
}
func (h *hostMem) set(a uint64, v byte, n uint64) error {
	m, err := h.bytes(a, n)
	for i := range m {
		m[i] = v
	}
	return err
}
func (h *hostMem) zero(spans []span) error {
	for _, s := range spans {
		if err := h.set(s.Addr, 0, s.Len); err != nil {
			return err
		}
	}
	return nil
}
func (h *hostMem) copy(dst, src, n uint64) error {
	d, err := h.bytes(dst, n)
	if err != nil {
		return err
	}
	s, err := h.bytes(src, n)
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}
func (h *hostMem) current() error { return nil }
func (h *hostMem) close() error   { return nil }

// chunk is the host staging size for filling and checking device memory.
const chunk = 64 << 20

// span is a range of device memory that must hold the pattern of a seed at
// pattern offset PatOff: the bytes a transfer copied from PatOff of a
// buffer filled with that seed.
type span struct {
	Addr   uint64 `json:"addr"`
	PatOff uint64 `json:"pat_off"`
	Len    uint64 `json:"len"`
}

// fillSpans writes the pattern of seed into each span, pattern offsets
// counted from its PatOff.
func fillSpans(m memory, seed uint64, spans []span) error {
	var buf []byte
	for _, s := range spans {
		for done := uint64(0); done < s.Len; {
			k := min(s.Len-done, chunk)
			if uint64(cap(buf)) < k {
				buf = make([]byte, k)
			}
			Fill(buf[:k], seed, s.PatOff+done)
			if err := m.write(s.Addr+done, buf[:k]); err != nil {
				return err
			}
			done += k
		}
	}
	return nil
}

// checkPattern verifies spans hold the pattern of seed, copying them back to
// the host; the error names the first wrong byte.
func checkPattern(m memory, seed uint64, spans []span) error {
	var got, scratch []byte
	for _, s := range spans {
		for done := uint64(0); done < s.Len; {
			k := min(s.Len-done, chunk)
			if uint64(cap(got)) < k {
				got, scratch = make([]byte, k), make([]byte, k)
			}
			if err := m.read(got[:k], s.Addr+done); err != nil {
				return err
			}
			if i := Mismatch(got[:k], seed, s.PatOff+done, scratch); i >= 0 {
				return fmt.Errorf("byte %d of the span at %#x (%d bytes, pattern offset %d, seed %d) is wrong: %#x", done+uint64(i), s.Addr, s.Len, s.PatOff, seed, got[i])
			}
			done += k
		}
	}
	return nil
}

// onThread runs f with the goroutine locked to its thread and the memory's
// context current there.
func onThread(m memory, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := m.current(); err != nil {
		return err
	}
	return f()
}
