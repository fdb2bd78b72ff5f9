package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const engineMetrics = `# HELP vllm:nixl_xfer_time_seconds Histogram of transfer duration for NIXL KV Cache transfers.
# TYPE vllm:nixl_xfer_time_seconds histogram
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.1"} 3
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="+Inf"} 4
vllm:nixl_xfer_time_seconds_sum{engine="0"} 0.5
vllm:nixl_xfer_time_seconds_count{engine="0"} 4
vllm:nixl_xfer_time_seconds_bucket{engine="1",le="+Inf"} 2
vllm:nixl_xfer_time_seconds_sum{engine="1"} 0.25
vllm:nixl_xfer_time_seconds_count{engine="1"} 2
# TYPE vllm:nixl_num_descriptors histogram
vllm:nixl_num_descriptors_bucket{le="+Inf"} 6
vllm:nixl_num_descriptors_sum 600
vllm:nixl_num_descriptors_count 6
# TYPE vllm:nixl_bytes_transferred histogram
vllm:nixl_bytes_transferred_bucket{le="+Inf"} 6
vllm:nixl_bytes_transferred_sum 6.291456e+06
vllm:nixl_bytes_transferred_count 6
# TYPE vllm:nixl_num_failed_transfers_total counter
vllm:nixl_num_failed_transfers_total 1
# TYPE gonixl_engine_kv_bytes_verified_total counter
gonixl_engine_kv_bytes_verified_total{engine="0"} 4096
# TYPE gonixl_engine_kv_verify_failures_total counter
gonixl_engine_kv_verify_failures_total{engine="0"} 2
# TYPE gonixl_engine_progress_reports_total counter
gonixl_engine_progress_reports_total{engine="0",result="taken"} 511
gonixl_engine_progress_reports_total{engine="0",result="refused"} 1
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 0
`

func TestParseTransfers(t *testing.T) {
	st, err := parseTransfers(strings.NewReader(engineMetrics))
	require.NoError(t, err)
	assert.Equal(t, transferStats{Transfers: 6, XferSeconds: 0.75, Descriptors: 600, Bytes: 6291456, FailedXfers: 1, HaveHistograms: true,
		KVVerified: 4096, KVVerifyFailures: 2, ProgressTaken: 511, ProgressRefused: 1}, st)
	mean, descs, bytes := st.mean()
	assert.Equal(t, 125*time.Millisecond, mean)
	assert.Equal(t, 100.0, descs)
	assert.Equal(t, 1048576.0, bytes)
	d := st.sub(transferStats{Transfers: 2, XferSeconds: 0.25, Descriptors: 200, Bytes: 1, HaveHistograms: true})
	assert.Equal(t, uint64(4), d.Transfers)
	assert.InDelta(t, 0.5, d.XferSeconds, 1e-12)
	sum := d.add(transferStats{Transfers: 1, KVVerified: 4})
	assert.Equal(t, uint64(5), sum.Transfers)
	assert.Equal(t, 4100.0, sum.KVVerified)
	assert.Equal(t, 511.0, sum.ProgressTaken, "sub and add keep the progress reports")
	assert.True(t, sum.HaveHistograms)
}

func TestParseTransfersGonixlNames(t *testing.T) {
	st, err := parseTransfers(strings.NewReader("# TYPE gonixl_nixl_xfer_time_seconds histogram\ngonixl_nixl_xfer_time_seconds_bucket{le=\"+Inf\"} 1\ngonixl_nixl_xfer_time_seconds_sum 2\ngonixl_nixl_xfer_time_seconds_count 1\n"))
	require.NoError(t, err)
	assert.Equal(t, transferStats{Transfers: 1, XferSeconds: 2, HaveHistograms: true}, st)
}

func TestParseTransfersRejectsGarbage(t *testing.T) {
	_, err := parseTransfers(strings.NewReader("vllm:x{ 1\n"))
	assert.ErrorContains(t, err, "metrics: ")
	st, err := parseTransfers(strings.NewReader(""))
	require.NoError(t, err)
	assert.False(t, st.HaveHistograms)
}

// An endpoint cannot make the bench read more than maxMetricsBytes.
func TestScrapeIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE a counter\n")
		line := bytes.Repeat([]byte("#"), 1<<20)
		for range 2 * maxMetricsBytes >> 20 {
			w.Write(line)
		}
	}))
	defer srv.Close()
	_, err := scrapeTransfers(context.Background(), srv.URL)
	require.Error(t, err, "a comment cut at the bound is not valid exposition")
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	_, err = scrapeTransfers(context.Background(), notFound.URL)
	assert.EqualError(t, err, "GET "+notFound.URL+"/metrics: HTTP 404")
}

// The parser reads bytes from the network: it never panics and what it
// returns is consistent.
func FuzzParseTransfers(f *testing.F) {
	f.Add([]byte(engineMetrics))
	f.Add([]byte("# TYPE vllm:nixl_xfer_time_seconds histogram\nvllm:nixl_xfer_time_seconds_count 1\n"))
	f.Add([]byte("vllm:nixl_num_descriptors_sum NaN\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseTransfers(bytes.NewReader(b))
		if err != nil {
			return
		}
		if st.Transfers == 0 {
			mean, d, by := st.mean()
			assert.Zero(t, mean)
			assert.Zero(t, d)
			assert.Zero(t, by)
		}
	})
}
