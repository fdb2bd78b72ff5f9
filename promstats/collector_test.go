package promstats

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/stats"
)

type setSource struct{ s *stats.Set }

// Stats converts as the connectors do, so the Collector reads the public
// type exactly as a rank returns it.
func (s setSource) Stats() connector.Stats {
	return engine.Public.Stats(s.s.Snapshot()).(connector.Stats)
}

func gather(t *testing.T, c *Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func TestCollectorExportsSnapshot(t *testing.T) {
	set := stats.New()
	set.Counter("registrations_received", "PUSH_REG notifications received.").Add(5)
	set.RecordTransfer(4096, 3, 20*time.Millisecond)
	set.RecordTransfer(1024, 1, 10*time.Millisecond)
	set.RecordPost(time.Millisecond)
	set.FailedTransfers.Inc()
	set.ExpiredRequests.Add(2)
	c := New(setSource{set}, Options{ConstLabels: prometheus.Labels{"engine_id": "e1", "tp_rank": "0"}})
	fams := gather(t, c)

	xfer := fams["nixl_xfer_time_seconds"].GetMetric()[0].GetHistogram()
	assert.Equal(t, uint64(2), xfer.GetSampleCount())
	assert.InDelta(t, 0.030, xfer.GetSampleSum(), 1e-9)
	// vLLM's buckets: 10 ms falls in le=0.01, 20 ms in le=0.025.
	require.Len(t, xfer.GetBucket(), 12)
	assert.Equal(t, 0.005, xfer.GetBucket()[0].GetUpperBound())
	assert.Equal(t, uint64(0), xfer.GetBucket()[0].GetCumulativeCount())
	assert.Equal(t, uint64(1), xfer.GetBucket()[1].GetCumulativeCount())
	assert.Equal(t, uint64(2), xfer.GetBucket()[2].GetCumulativeCount())
	bytes := fams["nixl_bytes_transferred"].GetMetric()[0].GetHistogram()
	assert.Equal(t, uint64(2), bytes.GetSampleCount())
	assert.Equal(t, 5120.0, bytes.GetSampleSum())
	assert.Equal(t, 2048.0, bytes.GetBucket()[0].GetUpperBound())
	assert.Equal(t, uint64(1), bytes.GetBucket()[0].GetCumulativeCount(), "1024 bytes <= 2 KiB")
	assert.Equal(t, float64(uint64(1)<<33), bytes.GetBucket()[len(bytes.GetBucket())-1].GetUpperBound())
	assert.Equal(t, 4.0, fams["nixl_num_descriptors"].GetMetric()[0].GetHistogram().GetSampleSum())
	assert.Equal(t, uint64(1), fams["nixl_post_time_seconds"].GetMetric()[0].GetHistogram().GetSampleCount())
	assert.Equal(t, 1.0, fams["nixl_num_failed_transfers_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, 2.0, fams["nixl_num_kv_expired_reqs_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, 0.0, fams["nixl_num_failed_handshakes_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, 5.0, fams["nixl_registrations_received_total"].GetMetric()[0].GetCounter().GetValue())
	labels := fams["nixl_num_failed_transfers_total"].GetMetric()[0].GetLabel()
	require.Len(t, labels, 2)
	assert.Equal(t, "engine_id", labels[0].GetName())
	assert.Equal(t, "e1", labels[0].GetValue())
	assert.Len(t, fams, 4+8+1)
}

func TestCollectorNamespaceAndLiveValues(t *testing.T) {
	set := stats.New()
	c := New(setSource{set}, Options{Namespace: "vllm"})
	assert.Equal(t, 0.0, gather(t, c)["vllm_nixl_num_failed_notifications_total"].GetMetric()[0].GetCounter().GetValue())
	set.FailedNotifications.Add(3)
	assert.Equal(t, 3.0, gather(t, c)["vllm_nixl_num_failed_notifications_total"].GetMetric()[0].GetCounter().GetValue())
}

// The exact names vLLM's dashboards query, with _bucket series.
func TestVLLMNamesScrape(t *testing.T) {
	set := stats.New()
	set.RecordTransfer(1<<20, 8, 3*time.Millisecond)
	for _, opts := range []Options{{VLLMNames: true}, {Namespace: "vllm:"}} {
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(New(setSource{set}, opts)))
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		require.NoError(t, err)
		text := string(body)
		for _, want := range []string{
			`vllm:nixl_xfer_time_seconds_bucket{le="0.005"} 1`,
			`vllm:nixl_xfer_time_seconds_count 1`,
			`vllm:nixl_post_time_seconds_bucket{le="+Inf"} 0`,
			`vllm:nixl_bytes_transferred_bucket{le="2.097152e+06"} 1`,
			`vllm:nixl_num_descriptors_bucket{le="10"} 1`,
			`vllm:nixl_num_failed_transfers_total 0`,
			`vllm:nixl_num_failed_notifications_total 0`,
			`vllm:nixl_num_kv_expired_reqs_total 0`,
		} {
			assert.Contains(t, text, want+"\n")
		}
		assert.NotContains(t, text, "vllm:_")
	}
}
