package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Workers bounds the renders and derenders that run at once: with every
// worker slot taken, a request waits QueueTimeout and is answered 503
// naming the workers (and counted); a free slot serves it.
func TestWorkersBoundConcurrentWork(t *testing.T) {
	for _, workers := range []int{1, 3} {
		s, ts := newTestServer(t, Config{Workers: workers, QueueTimeout: 20e6})
		require.Equal(t, workers, cap(s.workers))
		for range workers {
			s.workers <- struct{}{} // every slot busy
		}
		code, body := post(t, ts.URL+"/v1/chat/completions/render", weatherReq)
		require.Equal(t, 503, code, body)
		require.Contains(t, body, "no render worker free within 20ms")
		require.Contains(t, body, "(workers: "+string(rune('0'+workers))+")")
		require.Equal(t, 1.0, testutil.ToFloat64(s.m.busy))

		<-s.workers // one slot free
		code, body = post(t, ts.URL+"/v1/chat/completions/render", weatherReq)
		require.Equal(t, 200, code, body)
		require.Len(t, s.workers, workers-1, "the request gave its slot back")
		require.Equal(t, 1.0, testutil.ToFloat64(s.m.busy))
	}
}
