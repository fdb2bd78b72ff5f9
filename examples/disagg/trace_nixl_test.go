//go:build nixl

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gonixl/gonixl/examples/stack"
)

// The three programs as separate processes over NIXL UCX, each exporting
// its spans over OTLP/HTTP (-otlp-endpoint) to a receiver in the test:
// every request is one trace, the proxy's root span over its legs, the
// engines' spans under those and the connectors' under the engines', the
// transfers timed by NIXL's own telemetry (the engines' agents capture
// it), and the trace's TTFT within the client's.
func TestThreeProcessesTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := t.TempDir()
	_, err := stack.BuildPrograms(context.Background(), bin)
	require.NoError(t, err)
	for _, connector := range []string{"pull", "push"} {
		t.Run(connector, func(t *testing.T) {
			rcv := &otlpReceiver{}
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			env := []string{"UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR", "UCX_LOG_LEVEL=error", "UCX_ERROR_SIGNALS=",
				"OTEL_BSP_SCHEDULE_DELAY=100"} // export each batch within 100 ms
			model := []string{"-model", "qwen2.5-7b", "-layers", "4", "-head-dim", "64", "-tp", "1", "-num-blocks", "256",
				"-served-model-name", demoModel.Name, "-agent", "nixl", "-nixl-backend", "UCX", "-connector", connector,
				"-connector-log=false", "-otlp-endpoint", srv.URL}
			prefill := start(t, bin, "engine", env, append(model, "-role", "prefill", "-engine-id", "prefill-t", "-port", "0", "-side-channel-port", "0")...)
			decode := start(t, bin, "engine", env, append(model, "-role", "decode", "-engine-id", "decode-t", "-port", "0", "-side-channel-port", "0")...)
			prefillURL, decodeURL := logged(t, prefill, "ready", "url"), logged(t, decode, "ready", "url")
			waitHealthy(t, prefillURL+"/health")
			waitHealthy(t, decodeURL+"/health")
			proxy := start(t, bin, "proxy", env, "-port", "0", "-connector", connector, "-otlp-endpoint", srv.URL,
				"-prefill", strings.TrimPrefix(prefillURL, "http://"), "-decode", strings.TrimPrefix(decodeURL, "http://"))
			proxyURL := "http://" + logged(t, proxy, "listening", "addr")
			waitHealthy(t, proxyURL+"/healthcheck")

			const n = 3
			ttft := map[string]time.Duration{}
			for i := range n {
				id := fmt.Sprintf("trace-%s-%d", connector, i)
				ttft[id] = streamed(t, proxyURL, id)
			}
			// Every request's trace, complete: the hold ends last, once
			// decode's completion freed prefill's blocks.
			var traces map[string][]*tracepb.Span
			require.Eventually(t, func() bool {
				traces = rcv.byRequest()
				if len(traces) < n {
					return false
				}
				for _, spans := range traces {
					if countNamed(spans, "gonixl.hold") == 0 || countNamed(spans, "gonixl.transfer") == 0 || countNamed(spans, "gonixl.kv_wait") == 0 {
						return false
					}
				}
				return true
			}, 60*time.Second, 50*time.Millisecond, "every request's spans reach the receiver")
			require.Len(t, traces, n, "one trace per request")
			mover, moverURL := "gonixl.kv_wait", decodeURL // pull: decode READs
			if connector == "push" {
				mover, moverURL = "gonixl.hold", prefillURL // push: prefill WRITEs
			}
			// The histograms' source, on /metrics: every transfer timed by NIXL.
			assert.Equal(t, float64(n), metricSum(t, moverURL+"/metrics", "vllm:nixl_transfers_timed_by_nixl_total"))
			assert.Equal(t, float64(0), metricSum(t, moverURL+"/metrics", "vllm:nixl_transfers_timed_by_connector_total"))
			assert.Equal(t, float64(n), metricSum(t, moverURL+"/metrics", "vllm:nixl_xfer_time_seconds_count"))
			for id, spans := range traces {
				byID := map[string]*tracepb.Span{}
				for _, s := range spans {
					byID[hex.EncodeToString(s.SpanId)] = s
				}
				parent := func(s *tracepb.Span) string {
					if p := byID[hex.EncodeToString(s.ParentSpanId)]; p != nil {
						return p.Name
					}
					return ""
				}
				want := map[string]string{
					"proxy.request": "", "proxy.prefill_leg": "proxy.request", "proxy.decode_leg": "proxy.request",
					"engine.prefill": "proxy.prefill_leg", "engine.decode": "proxy.decode_leg",
					"gonixl.hold": "engine.prefill", "gonixl.kv_wait": "engine.decode",
					"gonixl.post": mover, "gonixl.transfer": mover,
				}
				for name, p := range want {
					require.Equal(t, 1, countNamed(spans, name), "%s: one %s span", id, name)
					s := spans[indexNamed(spans, name)]
					assert.Equal(t, p, parent(s), "%s: the parent of %s", id, name)
				}
				assert.Equal(t, 2, countNamed(spans, "engine.first_token"), "%s: each engine's first token", id)
				xfer := spans[indexNamed(spans, "gonixl.transfer")]
				assert.Equal(t, "nixl", attrString(xfer, "gonixl.timed_by"), "%s: the transfer is timed by NIXL's telemetry", id)
				root := spans[indexNamed(spans, "proxy.request")]
				var first *tracepb.Span_Event
				for _, e := range root.Events {
					if e.Name == "first_token" {
						first = e
					}
				}
				require.NotNil(t, first, "%s: the request span has a first_token event", id)
				traceTTFT := time.Duration(first.TimeUnixNano - root.StartTimeUnixNano)
				assert.Positive(t, traceTTFT)
				assert.LessOrEqual(t, traceTTFT, ttft[id], "%s: the trace's TTFT lies within the client's", id)
				overhead := -1.0
				for _, a := range root.Attributes {
					if a.Key == "gonixl.coordinator_overhead_seconds" {
						overhead = a.Value.GetDoubleValue()
					}
				}
				assert.GreaterOrEqual(t, overhead, 0.0, "%s: the request span has the coordinator overhead", id)
				assert.Less(t, overhead, traceTTFT.Seconds(), id)
				t.Logf("%s: trace TTFT %v, client TTFT %v, %d spans\n%s", id, traceTTFT, ttft[id], len(spans), tree(spans, root))
			}
		})
	}
}

// streamed sends a streamed completion with X-Request-Id id through the
// proxy and returns the client's TTFT: from before it sent the request to
// the first bytes of the answer.
func streamed(t *testing.T, url, id string) time.Duration {
	body, _ := json.Marshal(map[string]any{"model": demoModel.Name, "prompt": strings.Repeat("word ", 40), "max_tokens": 3, "stream": true})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	_, err = r.Peek(1)
	ttft := time.Since(sent)
	require.NoError(t, err)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(rest), "data: [DONE]")
	return ttft
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf, uncompressed):
// it keeps every span it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// byRequest groups the spans by trace, each trace keyed by its root
// span's request id; a trace without its root yet is left out.
func (o *otlpReceiver) byRequest() map[string][]*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	byTrace := map[string][]*tracepb.Span{}
	for _, s := range o.spans {
		k := hex.EncodeToString(s.TraceId)
		byTrace[k] = append(byTrace[k], s)
	}
	out := map[string][]*tracepb.Span{}
	for _, spans := range byTrace {
		if i := indexNamed(spans, "proxy.request"); i >= 0 {
			out[attrString(spans[i], "gonixl.request_id")] = spans
		}
	}
	return out
}

func indexNamed(spans []*tracepb.Span, name string) int {
	for i, s := range spans {
		if s.Name == name {
			return i
		}
	}
	return -1
}

func countNamed(spans []*tracepb.Span, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

func attrString(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// tree draws the spans under root, one a line, indented by depth, each
// with its start (from root's) and duration, and timed_by where set.
func tree(spans []*tracepb.Span, root *tracepb.Span) string {
	var b strings.Builder
	var walk func(s *tracepb.Span, depth int)
	walk = func(s *tracepb.Span, depth int) {
		at := time.Duration(s.StartTimeUnixNano - root.StartTimeUnixNano)
		d := time.Duration(s.EndTimeUnixNano - s.StartTimeUnixNano)
		fmt.Fprintf(&b, "%s%-*s +%-9v %v", strings.Repeat("  ", depth), 28-2*depth, s.Name, at.Round(time.Microsecond), d.Round(time.Microsecond))
		if by := attrString(s, "gonixl.timed_by"); by != "" {
			fmt.Fprintf(&b, "  timed_by=%s", by)
		}
		for _, a := range s.Attributes {
			if a.Key == "gonixl.coordinator_overhead_seconds" {
				fmt.Fprintf(&b, "  overhead=%v", time.Duration(a.Value.GetDoubleValue()*float64(time.Second)).Round(time.Microsecond))
			}
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "  %s at +%v", e.Name, time.Duration(e.TimeUnixNano-root.StartTimeUnixNano).Round(time.Microsecond))
		}
		b.WriteString("\n")
		var kids []*tracepb.Span
		for _, c := range spans {
			if bytes.Equal(c.ParentSpanId, s.SpanId) {
				kids = append(kids, c)
			}
		}
		slices.SortFunc(kids, func(x, y *tracepb.Span) int { return cmp.Compare(x.StartTimeUnixNano, y.StartTimeUnixNano) })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	walk(root, 0)
	return b.String()
}

// metricSum sums a series over an engine's ranks.
func metricSum(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err)
			sum += v
			found = true
		}
	}
	require.True(t, found, "%s has no %s", url, name)
	return sum
}
