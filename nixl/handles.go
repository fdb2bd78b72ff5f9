package nixl

import (
	"sync"
	"sync/atomic"
)

// handleTable maps the numbers that Go callers hold (XferHandle,
// DlistHandle) to the C++ objects they stand for. Callers never see a C
// pointer, so a released, forged or foreign handle is simply not found and
// becomes an error instead of a use-after-free inside NIXL.
//
// Each entry has its own read-write lock: calls that use a handle hold it
// for reading, and freeing holds it for writing, so a request can never be
// freed while another goroutine is inside a NIXL call with it. A table whose
// every use is already serialised by its owner (serial) skips the locking
// on the hot path, acquire and done.
type handleTable struct {
	serial bool
	mu     sync.RWMutex
	m      map[uint64]*handleEntry

	// hot is the entry a serial table found last, so that polling one
	// request until it completes skips the map. free and drain clear it.
	hotID uint64
	hot   *handleEntry
}

type handleEntry struct {
	ptr      uintptr
	mu       sync.RWMutex
	released bool
}

// lastHandle numbers handles process-wide, so a handle of one agent is
// never a valid handle of another.
var lastHandle atomic.Uint64

// add stores ptr and returns its new handle, never 0.
func (t *handleTable) add(ptr uintptr) uint64 {
	id := lastHandle.Add(1)
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[uint64]*handleEntry)
	}
	t.m[id] = &handleEntry{ptr: ptr}
	t.mu.Unlock()
	return id
}

// acquire returns the live entry for id, locked for reading, or nil. The
// caller must pass it to done. The serial table's hot entry is checked
// inline, so that polling one request costs no call here.
func (t *handleTable) acquire(id uint64) *handleEntry {
	if t.serial && id == t.hotID {
		// hotID is 0 (never a handle) when there is no hot entry, and
		// hot is then nil: not found, as for any other unknown id.
		return t.hot
	}
	return t.acquireSlow(id)
}

func (t *handleTable) acquireSlow(id uint64) *handleEntry {
	if t.serial {
		e := t.m[id]
		if e != nil {
			t.hotID, t.hot = id, e
		}
		return e
	}
	t.mu.RLock()
	e := t.m[id]
	t.mu.RUnlock()
	if e == nil {
		return nil
	}
	e.mu.RLock()
	if e.released {
		e.mu.RUnlock()
		return nil
	}
	return e
}

// done ends a use of an entry returned by acquire.
func (t *handleTable) done(e *handleEntry) {
	if !t.serial {
		t.doneShared(e)
	}
}

func (t *handleTable) doneShared(e *handleEntry) { e.mu.RUnlock() }

// free calls release on id's pointer while no one else uses it, and forgets
// the handle if release succeeds (a failed release leaves the handle live,
// as NIXL does). found is false for an unknown or already freed handle.
func (t *handleTable) free(id uint64, release func(ptr uintptr) Status) (s Status, found bool) {
	t.mu.Lock()
	e := t.m[id]
	if t.hotID == id {
		t.hotID, t.hot = 0, nil
	}
	t.mu.Unlock()
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		return 0, false
	}
	s = release(e.ptr)
	if !s.IsError() {
		e.released = true
		t.mu.Lock()
		delete(t.m, id)
		t.mu.Unlock()
	}
	return s, true
}

// drain forgets every handle and returns their pointers, for Close, which
// runs when no other call is in flight.
func (t *handleTable) drain() []uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hotID, t.hot = 0, nil
	ptrs := make([]uintptr, 0, len(t.m))
	for id, e := range t.m {
		e.mu.Lock()
		e.released = true
		e.mu.Unlock()
		ptrs = append(ptrs, e.ptr)
		delete(t.m, id)
	}
	return ptrs
}

// len returns the number of live handles.
func (t *handleTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
