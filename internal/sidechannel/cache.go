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
	ready chan struct{}
	val   V
	err   error
}

// Get returns key's cached value, or waits for the fetch in flight, or runs
// fetch on the calling goroutine. A waiter whose ctx ends stops waiting
// with ctx's error; the fetch itself obeys the ctx of the caller that runs it.
func (c *Cache[V]) Get(ctx context.Context, key string, fetch func(context.Context) (V, error)) (V, error) {
	c.mu.Lock()
	if v, ok := c.done[key]; ok {
		c.mu.Unlock()
		return v, nil
	}
	if f, ok := c.flights[key]; ok {
		c.mu.Unlock()
		select {
		case <-f.ready:
			return f.val, f.err
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
	f := &flight[V]{ready: make(chan struct{})}
	if c.flights == nil {
		c.flights = map[string]*flight[V]{}
		c.done = map[string]V{}
	}
	c.flights[key] = f
	c.mu.Unlock()

	f.val, f.err = fetch(ctx)

	c.mu.Lock()
	delete(c.flights, key)
	if f.err == nil {
		c.done[key] = f.val
	}
	c.mu.Unlock()
	close(f.ready)
	return f.val, f.err
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
