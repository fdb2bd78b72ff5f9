package pd

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reasons of gonixl_proxy_retries_total: what failed, and so where the retry goes.
const (
	reasonPrefillFailed     = "prefill_failed"     // the prefill leg: another prefill engine
	reasonDecodeKVFailed    = "decode_kv_failed"   // decode's 5xx after it took the request: another prefill engine
	reasonDecodeUnreachable = "decode_unreachable" // no connection to decode: another decode engine
	reasonDecodeRefused     = "decode_refused"     // decode's 503 before it took the request: another decode engine
	reasonDecodeClosed      = "decode_closed"      // decode's connection closed before it took the request in: another decode engine
	reasonRenderFailed      = "render_failed"      // a render or derender hop's server unreachable or 5xx: another render server
)

// metrics are the proxy's Prometheus series, on a registry of its own so that proxies in
// one process (tests) do not collide; GET /metrics serves it.
type metrics struct {
	reg      *prometheus.Registry
	handler  http.Handler
	requests *prometheus.CounterVec   // route, status
	legs     *prometheus.HistogramVec // leg, result
	ttft     *prometheus.HistogramVec // stream
	retries  *prometheus.CounterVec   // reason
	// historyTurns are chat turns sent with a history held on decode.
	historyTurns prometheus.Counter
}

// Leg latencies run from a few ms (a short prefill) to minutes (a long decode stream).
var legBuckets = prometheus.ExponentialBuckets(0.001, 2, 18) // 1 ms .. 131 s

func newMetrics(p *Proxy) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gonixl_proxy_requests_total",
		Help: "HTTP requests the proxy answered, by route and status (499: the client went away first)."}, []string{"route", "status"})
	m.legs = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gonixl_proxy_leg_duration_seconds",
		Help:    "Legs of completion requests, from sending to the engine to the end of its answer (decode: of its stream).",
		Buckets: legBuckets}, []string{"leg", "result"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gonixl_proxy_ttft_seconds",
		Help:    "Time to first token as the proxy sees it: from the client's request to the first byte of decode's answer written back (the whole answer when not streamed).",
		Buckets: legBuckets}, []string{"stream"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gonixl_proxy_retries_total",
		Help: "Requests retried once, by what failed: prefill_failed and decode_kv_failed go to another prefill engine, decode_unreachable, decode_refused and decode_closed (no KV was read) to another decode engine."},
		[]string{"reason"})
	m.historyTurns = prometheus.NewCounter(prometheus.CounterOpts{Name: "gonixl_proxy_history_turns_total",
		Help: "Chat turns whose prefill leg got the conversation's history held on a decode engine, to read back (Config.Bidirectional)."})
	for _, r := range []string{reasonPrefillFailed, reasonDecodeKVFailed, reasonDecodeUnreachable, reasonDecodeRefused, reasonDecodeClosed, reasonRenderFailed} {
		m.retries.WithLabelValues(r) // every reason is a series from the start
	}
	inRotation := func(r role) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gonixl_proxy_engines_in_rotation",
			Help: "Engines that may get requests now (health check passed, right connector and role).", ConstLabels: prometheus.Labels{"role": r.String()}},
			func() float64 {
				pools := p.pools()
				if r == rolePrefill {
					return float64(p.inRotationCount(pools.prefill))
				}
				return float64(p.inRotationCount(pools.decode))
			})
	}
	m.reg.MustRegister(m.requests, m.legs, m.ttft, m.retries, m.historyTurns, inRotation(rolePrefill), inRotation(roleDecode),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// Registry is the registry GET /metrics serves, for a program that wants the proxy's series
// on its own endpoint too.
func (p *Proxy) Registry() *prometheus.Registry { return p.met.reg }

func (m *metrics) leg(name string, start time.Time, ok bool) {
	result := "ok"
	if !ok {
		result = "error"
	}
	m.legs.WithLabelValues(name, result).Observe(time.Since(start).Seconds())
}

func (m *metrics) firstToken(c *completion) {
	now := time.Now()
	m.ttft.WithLabelValues(strconv.FormatBool(c.stream)).Observe(now.Sub(c.start).Seconds())
	c.traceFirstToken(now)
}

// routeLabel keeps the route label to the paths the proxy serves: any other is "other", so
// that scanners cannot grow the series without bound.
func routeLabel(path string) string {
	switch path {
	case "/v1/completions", "/v1/chat/completions", "/v1/models", "/healthcheck", "/metrics":
		return path
	}
	return "other"
}

// statusWriter remembers the status written, for gonixl_proxy_requests_total. Unwrap lets
// http.ResponseController reach the server's Flusher.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// count records a request when its handler returns; nothing written means the client went
// away first (499, as nginx logs it).
func (m *metrics) count(r *http.Request, s *statusWriter) {
	status := s.status
	if status == 0 {
		status = http.StatusOK
		if r.Context().Err() != nil {
			status = 499
		}
	}
	m.requests.WithLabelValues(routeLabel(r.URL.Path), strconv.Itoa(status)).Inc()
}
