package nixl

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
)

// Buffer is host memory allocated outside the Go heap with mmap, page
// aligned, for registering with an agent: NIXL may keep its address as long
// as it likes, which Go heap memory does not allow. Free it explicitly; the
// garbage collector never does.
type Buffer struct {
	mu  sync.Mutex
	mem []byte
}

// live maps the start address of every unfreed Buffer to its memory, so that
// agents written in Go (nixl/loopback) can turn a descriptor's address back
// into bytes without converting integers to pointers.
var live = struct {
	sync.RWMutex
	starts []uint64 // sorted
	bufs   map[uint64][]byte
}{bufs: map[uint64][]byte{}}

// AllocBuffer maps size bytes of zeroed, page-aligned host memory.
func AllocBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("nixl: AllocBuffer: size must be positive, got %d", size)
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("nixl: AllocBuffer: mmap %d bytes: %w", size, err)
	}
	b := &Buffer{mem: mem}
	a := b.addrLocked()
	live.Lock()
	live.bufs[a] = mem
	i := sort.Search(len(live.starts), func(i int) bool { return live.starts[i] >= a })
	live.starts = append(live.starts, 0)
	copy(live.starts[i+1:], live.starts[i:])
	live.starts[i] = a
	live.Unlock()
	return b, nil
}

// Bytes returns the buffer's memory as a slice; nil after Free. Never keep
// the slice past Free: its memory is unmapped.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Len returns the buffer's size in bytes, 0 after Free.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mem)
}

// Addr returns the buffer's start address for descriptors; 0 after Free.
func (b *Buffer) Addr() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addrLocked()
}

// Desc returns a descriptor of n bytes starting off bytes into the buffer.
func (b *Buffer) Desc(off, n uint64) Desc {
	return Desc{Addr: b.Addr() + off, Len: n}
}

// RegDesc returns a registration descriptor covering the whole buffer.
func (b *Buffer) RegDesc() RegDesc {
	return RegDesc{Desc: Desc{Addr: b.Addr(), Len: uint64(b.Len())}}
}

// Free unmaps the buffer. It is idempotent. Deregister the buffer from every
// agent first: freeing registered memory leaves the agent with a dangling
// address.
func (b *Buffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem == nil {
		return nil
	}
	a := b.addrLocked()
	live.Lock()
	delete(live.bufs, a)
	i := sort.Search(len(live.starts), func(i int) bool { return live.starts[i] >= a })
	if i < len(live.starts) && live.starts[i] == a {
		live.starts = append(live.starts[:i], live.starts[i+1:]...)
	}
	live.Unlock()
	err := syscall.Munmap(b.mem)
	b.mem = nil
	if err != nil {
		return fmt.Errorf("nixl: Buffer.Free: munmap: %w", err)
	}
	return nil
}

func (b *Buffer) addrLocked() uint64 {
	if len(b.mem) == 0 {
		return 0
	}
	return sliceAddr(b.mem)
}

// ErrNotHostMemory is returned by HostBytes for a range that no live Buffer
// contains.
var ErrNotHostMemory = errors.New("nixl: address range is not inside a live nixl.Buffer")

// HostBytes returns the bytes [addr, addr+n) of a live Buffer. It is for agent
// implementations written in Go, such as nixl/loopback, which move real bytes
// between registered memory. The range must lie inside one Buffer.
func HostBytes(addr, n uint64) ([]byte, error) {
	live.RLock()
	defer live.RUnlock()
	i := sort.Search(len(live.starts), func(i int) bool { return live.starts[i] > addr }) - 1
	if i < 0 {
		return nil, ErrNotHostMemory
	}
	start := live.starts[i]
	mem := live.bufs[start]
	off := addr - start
	if off > uint64(len(mem)) || n > uint64(len(mem))-off {
		return nil, ErrNotHostMemory
	}
	return mem[off : off+n : off+n], nil
}
