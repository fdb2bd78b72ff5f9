package promstats

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/stats"
)

type setSource struct{ s *stats.Set }

func (s setSource) Stats() stats.Snapshot { return s.s.Snapshot() }

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

	xfer := fams["nixl_xfer_time_seconds"].GetMetric()[0].GetSummary()
	assert.Equal(t, uint64(2), xfer.GetSampleCount())
	assert.InDelta(t, 0.030, xfer.GetSampleSum(), 1e-9)
	bytes := fams["nixl_bytes_transferred"].GetMetric()[0].GetSummary()
	assert.Equal(t, uint64(2), bytes.GetSampleCount())
	assert.Equal(t, 5120.0, bytes.GetSampleSum())
	assert.Equal(t, 4.0, fams["nixl_num_descriptors"].GetMetric()[0].GetSummary().GetSampleSum())
	assert.Equal(t, uint64(1), fams["nixl_post_time_seconds"].GetMetric()[0].GetSummary().GetSampleCount())
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
