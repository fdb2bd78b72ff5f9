package sidechannel

import (
	"context"
	"sync"
)

// Cache remembers one successful result per key (a remote engine) and runs
// at most one fetch per key at a time: callers that ask while a fetch is in
// flight wait for its result instead of starting another. Failures are not
// remembered, so the next Get tries again.
type Cache[V any] struct {
	mu      sync.Mutex
	done    map[string]V
	flights map[string]*flight[V]
}

type flight[V any] struct {
	ready   chan struct{}
	val     V
	err     error
	waiters int                // callers still waiting for it
	cancel  context.CancelFunc // stops the fetch once nobody waits
}

// Get returns key's cached value, or waits for the fetch in flight, or
// starts one. The fetch belongs to no caller: it runs on its own goroutine
// with a context that keeps the first caller's values but not its
// cancellation, and is cancelled only when every caller waiting for it has
// stopped waiting. So one caller giving up (its ctx ended: a rank closed)
// does not fail the others; each caller stops waiting when its own ctx
// ends, with ctx's error. fetch must bound its own duration.
func (c *Cache[V]) Get(ctx context.Context, key string, fetch func(context.Context) (V, error)) (V, error) {
	c.mu.Lock()
	if v, ok := c.done[key]; ok {
		c.mu.Unlock()
		return v, nil
	}
	f, ok := c.flights[key]
	if ok {
		f.waiters++
	} else {
		if c.flights == nil {
			c.flights = map[string]*flight[V]{}
			c.done = map[string]V{}
		}
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight[V]{ready: make(chan struct{}), waiters: 1, cancel: cancel}
		c.flights[key] = f
		go c.run(fctx, key, f, fetch)
	}
	c.mu.Unlock()
	select {
	case <-f.ready:
		return f.val, f.err
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			// Nobody wants the result: stop the fetch, and let the next
			// Get start afresh rather than join a cancelled one.
			f.cancel()
			if c.flights[key] == f {
				delete(c.flights, key)
			}
		}
		c.mu.Unlock()
		var zero V
		return zero, ctx.Err()
	}
}

// run performs one fetch and hands its result to the waiters.
func (c *Cache[V]) run(ctx context.Context, key string, f *flight[V], fetch func(context.Context) (V, error)) {
	defer f.cancel()
	val, err := fetch(ctx)
	c.mu.Lock()
	f.val, f.err = val, err
	if c.flights[key] == f {
		delete(c.flights, key)
	}
	if err == nil {
		c.done[key] = val
	}
	c.mu.Unlock()
	close(f.ready)
}

// Peek returns key's cached value without fetching.
func (c *Cache[V]) Peek(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.done[key]
	return v, ok
}

// Forget drops key's cached value, so the next Get fetches again (after the
// remote engine restarted or disconnected).
func (c *Cache[V]) Forget(key string) {
	c.mu.Lock()
	delete(c.done, key)
	c.mu.Unlock()
}
