package nixl

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandleTableLifecycle(t *testing.T) {
	var tab handleTable
	h := tab.add(0x1000)
	require.NotZero(t, h)

	e := tab.acquire(h)
	require.NotNil(t, e)
	assert.Equal(t, uintptr(0x1000), e.ptr)
	tab.done(e)

	var freed []uintptr
	s, found := tab.free(h, func(p uintptr) Status { freed = append(freed, p); return StatusSuccess })
	assert.True(t, found)
	assert.Equal(t, StatusSuccess, s)
	assert.Equal(t, []uintptr{0x1000}, freed)

	_, found = tab.free(h, func(p uintptr) Status { t.Fatal("freed twice"); return 0 })
	assert.False(t, found, "second free must not reach NIXL")
	assert.Nil(t, tab.acquire(h))
	assert.Zero(t, tab.len())
}

func TestHandleTableFailedFreeKeepsHandle(t *testing.T) {
	var tab handleTable
	h := tab.add(0x2000)
	s, found := tab.free(h, func(uintptr) Status { return StatusRepostActive })
	assert.True(t, found)
	assert.Equal(t, StatusRepostActive, s)
	e := tab.acquire(h)
	require.NotNil(t, e, "a request NIXL could not release is still live")
	tab.done(e)
}

func TestHandlesAreUniqueAcrossTables(t *testing.T) {
	var a, b handleTable
	ha := a.add(1)
	hb := b.add(1)
	assert.NotEqual(t, ha, hb)
	assert.Nil(t, b.acquire(ha), "a handle of one agent is unknown to another")
	assert.Nil(t, a.acquire(0))
	_, found := b.free(ha, func(uintptr) Status { return StatusSuccess })
	assert.False(t, found)
}

func TestHandleFreeWaitsForUsers(t *testing.T) {
	var tab handleTable
	h := tab.add(0x3000)
	e := tab.acquire(h)
	require.NotNil(t, e)

	var released atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		tab.free(h, func(uintptr) Status { released.Store(true); return StatusSuccess })
	}()
	time.Sleep(20 * time.Millisecond)
	assert.False(t, released.Load(), "free ran while the handle was in use")
	tab.done(e)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("free did not finish after the user was done")
	}
	assert.True(t, released.Load())
}

func TestHandleTableConcurrentFreeOnce(t *testing.T) {
	var tab handleTable
	h := tab.add(0x4000)
	var calls atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tab.free(h, func(uintptr) Status { calls.Add(1); return StatusSuccess })
			if e := tab.acquire(h); e != nil {
				tab.done(e)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), calls.Load())
}

func TestSerialHandleTable(t *testing.T) {
	tab := handleTable{serial: true}
	h := tab.add(0x5000)
	e := tab.acquire(h)
	require.NotNil(t, e)
	assert.Equal(t, uintptr(0x5000), e.ptr)
	tab.done(e)
	_, found := tab.free(h, func(uintptr) Status { return StatusSuccess })
	assert.True(t, found)
	assert.Nil(t, tab.acquire(h))
	_, found = tab.free(h, func(uintptr) Status { t.Fatal("freed twice"); return 0 })
	assert.False(t, found)
}

func TestHandleTableDrain(t *testing.T) {
	var tab handleTable
	h1, h2 := tab.add(10), tab.add(20)
	got := tab.drain()
	assert.ElementsMatch(t, []uintptr{10, 20}, got)
	assert.Nil(t, tab.acquire(h1))
	assert.Nil(t, tab.acquire(h2))
	assert.Empty(t, tab.drain())
}
