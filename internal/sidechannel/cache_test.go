package sidechannel

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The first caller's cancellation must not fail the fetch that a second
// caller waits for (two ranks of one engine share one handshake).
func TestCacheFirstCallerCancelDoesNotFailOthers(t *testing.T) {
	var c Cache[int]
	started, release := make(chan struct{}), make(chan struct{})
	var fetchErr error
	fetch := func(ctx context.Context) (int, error) {
		close(started)
		select {
		case <-release:
			return 5, nil
		case <-ctx.Done():
			fetchErr = ctx.Err()
			return 0, ctx.Err()
		}
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx1, "k", fetch)
		first <- err
	}()
	<-started
	type result struct {
		v   int
		err error
	}
	second := make(chan result, 1)
	go func() {
		v, err := c.Get(context.Background(), "k", fetch)
		second <- result{v, err}
	}()
	time.Sleep(10 * time.Millisecond) // the second joins the flight
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled, "the first stops waiting on its own ctx")
	close(release)
	require.Equal(t, result{v: 5}, <-second)
	require.NoError(t, fetchErr, "the fetch ran on")
	v, ok := c.Peek("k")
	require.True(t, ok)
	require.Equal(t, 5, v)
}

// When every waiter has gone, the fetch is cancelled (no goroutine left
// running for nobody) and the next Get starts a fresh one.
func TestCacheFetchCancelledWhenNobodyWaits(t *testing.T) {
	var c Cache[int]
	stopped := make(chan error, 1)
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "k", func(fctx context.Context) (int, error) {
			close(started)
			<-fctx.Done()
			stopped <- fctx.Err()
			return 0, fctx.Err()
		})
		errc <- err
	}()
	<-started
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the fetch outlived its last waiter")
	}
	v, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { return 9, nil })
	require.NoError(t, err)
	require.Equal(t, 9, v)
}
