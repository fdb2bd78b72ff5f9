package promstats

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gonixl/gonixl/connector"
)

// Source is anything with connector statistics: a pullconn or pushconn
// Producer or Consumer, or a connector.Engine.
type Source interface {
	Stats() connector.Stats
}

// Options configure a Collector.
type Options struct {
	// Namespace prefixes every metric name: "gonixl" gives
	// gonixl_nixl_xfer_time_seconds; one ending in ':' is joined without
	// '_', so "vllm:" gives vLLM's own names (vllm:nixl_xfer_time_seconds).
	// Empty means none.
	Namespace string
	// VLLMNames exports vLLM's exact metric names (namespace "vllm:"),
	// whatever Namespace says, so dashboards built for vLLM's NIXL
	// connector read these series unchanged.
	VLLMNames bool
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
	// prefixHits is the per-group prefix-hit counter, one series per
	// KV-cache group (labels group and kind).
	prefixHits *prometheus.Desc
}

type fixedMetric struct {
	desc *prometheus.Desc
	get  func(*connector.Stats) uint64
}

type extraMetric struct {
	name string
	desc *prometheus.Desc
}

// New returns a collector for src. The connector-specific counters (a push
// connector's registration counters) are those src has when New is called;
// connectors register them at construction.
func New(src Source, opts Options) *Collector {
	ns := opts.Namespace
	if opts.VLLMNames {
		ns = "vllm:"
	}
	name := func(n string) string {
		if strings.HasSuffix(ns, ":") {
			return ns + n
		}
		return prometheus.BuildFQName(ns, "", n)
	}
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, labels, opts.ConstLabels)
	}
	c := &Collector{
		src:      src,
		xferTime: desc("nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache transfers."),
		postTime: desc("nixl_post_time_seconds", "Histogram of transfer post time for NIXL KV Cache transfers."),
		bytes:    desc("nixl_bytes_transferred", "Histogram of bytes transferred per NIXL KV Cache transfers."),
		descs:    desc("nixl_num_descriptors", "Histogram of number of descriptors per NIXL KV Cache transfers."),
		prefixHits: desc("nixl_prefix_hit_blocks_total",
			"Logical KV blocks a decode rank's grouped requests left out as already held (prefix-cache hits), per KV-cache group.",
			"group", "kind"),
	}
	for _, f := range []struct {
		n, help string
		get     func(*connector.Stats) uint64
	}{
		{"nixl_num_failed_transfers_total", "Number of failed NIXL KV-cache transfers.", func(s *connector.Stats) uint64 { return s.FailedTransfers }},
		{"nixl_num_failed_notifications_total", "Number of NIXL notifications that could not be sent.", func(s *connector.Stats) uint64 { return s.FailedNotifications }},
		{"nixl_num_failed_handshakes_total", "Number of side-channel handshakes that failed or were refused.", func(s *connector.Stats) uint64 { return s.FailedHandshakes }},
		{"nixl_num_kv_expired_reqs_total", "Number of requests whose held KV blocks were released by lease expiry.", func(s *connector.Stats) uint64 { return s.ExpiredRequests }},
		{"nixl_num_unknown_notifications_total", "Number of notifications naming a request this rank does not know.", func(s *connector.Stats) uint64 { return s.UnknownNotifications }},
		{"nixl_num_late_notifications_total", "Number of completions that arrived after the request's lease expired.", func(s *connector.Stats) uint64 { return s.LateNotifications }},
		{"nixl_num_malformed_notifications_total", "Number of notifications that could not be decoded.", func(s *connector.Stats) uint64 { return s.MalformedNotifications }},
		{"nixl_num_malformed_frames_total", "Number of side-channel frames that could not be decoded.", func(s *connector.Stats) uint64 { return s.MalformedFrames }},
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
	ch <- c.prefixHits
}

// Collect reads the source once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- histogram(c.xferTime, s.XferTimeHist)
	ch <- histogram(c.postTime, s.PostTimeHist)
	ch <- histogram(c.bytes, s.BytesHist)
	ch <- histogram(c.descs, s.DescriptorsHist)
	for _, f := range c.fixed {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(f.get(&s)))
	}
	for _, x := range c.extra {
		v, _ := s.Get(x.name)
		ch <- prometheus.MustNewConstMetric(x.desc, prometheus.CounterValue, float64(v))
	}
	for _, g := range s.PrefixHitBlocks {
		ch <- prometheus.MustNewConstMetric(c.prefixHits, prometheus.CounterValue, float64(g.Value), strconv.Itoa(g.Group), g.Kind)
	}
}

func histogram(d *prometheus.Desc, h connector.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Cumulative[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}
