package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxyMetrics serves a proxy's in-rotation series: the prefill engine out
// for the first outScrapes scrapes, then in; the decode engine always in.
func proxyMetrics(t *testing.T, outScrapes int64) (url string, scrapes *atomic.Int64) {
	scrapes = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		prefill := 1
		if scrapes.Add(1) <= outScrapes {
			prefill = 0
		}
		fmt.Fprintf(w, "# TYPE %s gauge\n%s{role=\"decode\"} 1\n%s{role=\"prefill\"} %d\n", inRotationSeries, inRotationSeries, inRotationSeries, prefill)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, scrapes
}

// The recovery traffic after a restart starts only once the proxy reports
// the restarted engine in rotation: step 7 of the process-mode soak sent
// it when the engine answered its own /health, before the proxy's next
// health check, and two calls got "503: no prefill engine in rotation".
func TestWaitInRotationWaitsForTheProxy(t *testing.T) {
	url, scrapes := proxyMetrics(t, 3)
	require.NoError(t, waitInRotation(url, 1, time.Now(), time.Minute))
	assert.Equal(t, int64(4), scrapes.Load(), "returned at the first scrape with the prefill engine in rotation")
}

// A proxy that never brings the engine back fails the wait when its bound
// passes, naming the role and what the proxy reported.
func TestWaitInRotationBounded(t *testing.T) {
	url, _ := proxyMetrics(t, 1<<62)
	err := waitInRotation(url, 1, time.Now(), 300*time.Millisecond)
	require.Error(t, err)
	assert.Equal(t, fmt.Sprintf("the proxy %s did not report every engine in rotation within 300ms (engines in rotation: prefill 0 of 1)", url), err.Error())
}

// A proxy that does not answer fails the wait with the scrape's error.
func TestWaitInRotationProxyDown(t *testing.T) {
	url, _ := proxyMetrics(t, 0)
	err := waitInRotation(url+"/nothing", 1, time.Now(), 200*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 404")
}
