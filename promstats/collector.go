package promstats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gonixl/gonixl/internal/stats"
)

// Source is anything with connector statistics: a pullconn or pushconn
// Producer, Consumer or Engine.
type Source interface {
	Stats() stats.Snapshot
}

// Options configure a Collector.
type Options struct {
	// Namespace prefixes every metric name ("vllm" gives vllm_nixl_...);
	// empty means none.
	Namespace string
	// ConstLabels are attached to every metric, e.g. engine_id, tp_rank and
	// role, so that several ranks can be registered side by side.
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector reading one Source at each scrape.
type Collector struct {
	src      Source
	fixed    []fixedMetric
	xferTime *prometheus.Desc
	postTime *prometheus.Desc
	bytes    *prometheus.Desc
	descs    *prometheus.Desc
	extra    []extraMetric
}

type fixedMetric struct {
	desc *prometheus.Desc
	get  func(*stats.Snapshot) uint64
}

type extraMetric struct {
	name string
	desc *prometheus.Desc
}

// New returns a collector for src. The connector-specific counters (a push
// connector's registration counters) are those src has when New is called;
// connectors register them at construction.
func New(src Source, opts Options) *Collector {
	name := func(n string) string { return prometheus.BuildFQName(opts.Namespace, "", n) }
	desc := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, nil, opts.ConstLabels)
	}
	c := &Collector{
		src:      src,
		xferTime: desc("nixl_xfer_time_seconds", "Time from posting a NIXL KV-cache transfer to its completion."),
		postTime: desc("nixl_post_time_seconds", "Time to prepare and post one request's NIXL KV-cache transfers."),
		bytes:    desc("nixl_bytes_transferred", "Bytes moved by NIXL KV-cache transfers (sum) over transfers (count)."),
		descs:    desc("nixl_num_descriptors", "Descriptors posted by NIXL KV-cache transfers (sum) over transfers (count)."),
	}
	for _, f := range []struct {
		n, help string
		get     func(*stats.Snapshot) uint64
	}{
		{"nixl_num_failed_transfers_total", "Number of failed NIXL KV-cache transfers.", func(s *stats.Snapshot) uint64 { return s.FailedTransfers }},
		{"nixl_num_failed_notifications_total", "Number of NIXL notifications that could not be sent.", func(s *stats.Snapshot) uint64 { return s.FailedNotifications }},
		{"nixl_num_failed_handshakes_total", "Number of side-channel handshakes that failed or were refused.", func(s *stats.Snapshot) uint64 { return s.FailedHandshakes }},
		{"nixl_num_kv_expired_reqs_total", "Number of requests whose held KV blocks were released by lease expiry.", func(s *stats.Snapshot) uint64 { return s.ExpiredRequests }},
		{"nixl_num_unknown_notifications_total", "Number of notifications naming a request this rank does not know.", func(s *stats.Snapshot) uint64 { return s.UnknownNotifications }},
		{"nixl_num_late_notifications_total", "Number of completions that arrived after the request's lease expired.", func(s *stats.Snapshot) uint64 { return s.LateNotifications }},
		{"nixl_num_malformed_notifications_total", "Number of notifications that could not be decoded.", func(s *stats.Snapshot) uint64 { return s.MalformedNotifications }},
		{"nixl_num_malformed_frames_total", "Number of side-channel frames that could not be decoded.", func(s *stats.Snapshot) uint64 { return s.MalformedFrames }},
	} {
		c.fixed = append(c.fixed, fixedMetric{desc: desc(f.n, f.help), get: f.get})
	}
	for _, x := range src.Stats().Extra {
		c.extra = append(c.extra, extraMetric{name: x.Name, desc: desc("nixl_"+x.Name+"_total", x.Help)})
	}
	return c
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.xferTime
	ch <- c.postTime
	ch <- c.bytes
	ch <- c.descs
	for _, f := range c.fixed {
		ch <- f.desc
	}
	for _, x := range c.extra {
		ch <- x.desc
	}
}

// Collect reads the source once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	quantiles := func(p50, p90, p99 float64) map[float64]float64 {
		return map[float64]float64{0.5: p50, 0.9: p90, 0.99: p99}
	}
	ch <- prometheus.MustNewConstSummary(c.xferTime, s.XferTime.Count, s.XferTime.Sum.Seconds(),
		quantiles(s.XferTime.P50.Seconds(), s.XferTime.P90.Seconds(), s.XferTime.P99.Seconds()))
	ch <- prometheus.MustNewConstSummary(c.postTime, s.PostTime.Count, s.PostTime.Sum.Seconds(),
		quantiles(s.PostTime.P50.Seconds(), s.PostTime.P90.Seconds(), s.PostTime.P99.Seconds()))
	ch <- prometheus.MustNewConstSummary(c.bytes, s.Transfers, float64(s.Bytes), nil)
	ch <- prometheus.MustNewConstSummary(c.descs, s.Transfers, float64(s.Descriptors), nil)
	for _, f := range c.fixed {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(f.get(&s)))
	}
	for _, x := range c.extra {
		v, _ := s.Get(x.name)
		ch <- prometheus.MustNewConstMetric(x.desc, prometheus.CounterValue, float64(v))
	}
}
