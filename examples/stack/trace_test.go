package stack

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gonixl/gonixl/examples/proxy/pd"
)

// Every request through the stack is one trace: the proxy's request span,
// its prefill and decode legs, the engines' spans under them and the
// connectors' under those (the hold on prefill; the wait for KV on
// decode; handshake, post and transfer under whichever rank moved the
// bytes), and the trace's TTFT, from the request span's start to its
// first_token event, lies within the client's own measurement of it.
func TestTracePerRequest(t *testing.T) {
	for _, mode := range Modes {
		t.Run(mode, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			defer tp.Shutdown(t.Context())
			s, err := Start(Config{Mode: mode, Model: tiny, NumBlocks: 64, TracerProvider: tp})
			require.NoError(t, err)
			defer s.Close()

			var ttfts []time.Duration
			for range 2 {
				ttfts = append(ttfts, streamTTFT(t, s.URL()))
			}
			// The connectors' last spans (prefill's hold, which ends once
			// decode's completion freed the blocks) end after the answer.
			require.Eventually(t, func() bool { return count(exp.GetSpans(), "gonixl.hold") == 2 }, 10*time.Second, 5*time.Millisecond)

			traces := byTrace(exp.GetSpans())
			require.Len(t, traces, 2, "one trace per request")
			for i, spans := range traces {
				root := only(t, spans, pd.RequestSpan)
				assert.False(t, root.Parent.IsValid(), "the proxy's request span is the root")
				pl, dl := only(t, spans, "proxy.prefill_leg"), only(t, spans, "proxy.decode_leg")
				childOf(t, pl, root)
				childOf(t, dl, root)
				pe, de := only(t, spans, "engine.prefill"), only(t, spans, "engine.decode")
				childOf(t, pe, pl)
				childOf(t, de, dl)
				hold, wait := only(t, spans, "gonixl.hold"), only(t, spans, "gonixl.kv_wait")
				childOf(t, hold, pe)
				childOf(t, wait, de)
				// The bytes' mover: pull's decode READs, push's prefill WRITEs.
				mover := wait
				if mode == "push" {
					mover = hold
				}
				childOf(t, only(t, spans, "gonixl.post"), mover)
				xfer := only(t, spans, "gonixl.transfer")
				childOf(t, xfer, mover)
				assert.Contains(t, xfer.Attributes, attr("gonixl.timed_by", "connector"), "loopback agents capture no NIXL telemetry")
				// Decode handshakes with the prefill engine for its first
				// request only (pull before its READ, push before its
				// registration).
				if i == 0 {
					childOf(t, only(t, spans, "gonixl.handshake"), wait)
				} else {
					assert.Zero(t, count(spans, "gonixl.handshake"), "request %d", i)
				}
				// Each engine's first token, after decode's KV came in.
				for _, e := range []tracetest.SpanStub{pe, de} {
					var ft []tracetest.SpanStub
					for _, s := range spans {
						if s.Name == "engine.first_token" && s.Parent.SpanID() == e.SpanContext.SpanID() {
							ft = append(ft, s)
						}
					}
					require.Len(t, ft, 1, "%s has one engine.first_token child", e.Name)
					assert.False(t, ft[0].StartTime.After(ft[0].EndTime))
					if e.Name == "engine.decode" {
						assert.False(t, ft[0].StartTime.Before(wait.EndTime), "decode computes once its KV is in")
					}
				}

				// The trace's TTFT, within the client's bracket.
				ev := slices.IndexFunc(root.Events, func(e sdktrace.Event) bool { return e.Name == pd.FirstTokenEvent })
				require.GreaterOrEqual(t, ev, 0, "the request span has a first_token event")
				traceTTFT := root.Events[ev].Time.Sub(root.StartTime)
				assert.Positive(t, traceTTFT)
				assert.LessOrEqual(t, traceTTFT, ttftOf(t, traces, ttfts, i), "the trace's TTFT lies within the client's")
				assert.False(t, root.Events[ev].Time.Before(wait.EndTime), "decode's first token comes after its KV")
				// The proxy's own part of the TTFT: not negative, and less
				// than the TTFT, the legs having been in flight for some.
				var overhead float64 = -1
				for _, a := range root.Attributes {
					if a.Key == pd.OverheadAttr {
						overhead = a.Value.AsFloat64()
					}
				}
				assert.GreaterOrEqual(t, overhead, 0.0, "the request span has %s", pd.OverheadAttr)
				assert.Less(t, overhead, traceTTFT.Seconds())
			}
		})
	}
}

// streamTTFT sends a streamed completion through the proxy at url and
// returns the client's TTFT: from before it sent the request to its first
// bytes of the answer. It reads the whole answer.
func streamTTFT(t *testing.T, url string) time.Duration {
	body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen", "max_tokens": 3, "stream": true})
	sent := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	_, err = r.Peek(1)
	ttft := time.Since(sent)
	require.NoError(t, err)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]"), "%s", rest)
	return ttft
}

// byTrace groups spans by trace, in the order of their root spans' starts.
func byTrace(spans tracetest.SpanStubs) []tracetest.SpanStubs {
	m := map[trace.TraceID]tracetest.SpanStubs{}
	var ids []trace.TraceID
	for _, s := range spans {
		id := s.SpanContext.TraceID()
		if _, ok := m[id]; !ok {
			ids = append(ids, id)
		}
		m[id] = append(m[id], s)
	}
	out := make([]tracetest.SpanStubs, 0, len(ids))
	for _, id := range ids {
		out = append(out, m[id])
	}
	slices.SortFunc(out, func(a, b tracetest.SpanStubs) int {
		return rootOf(a).StartTime.Compare(rootOf(b).StartTime)
	})
	return out
}

func rootOf(spans tracetest.SpanStubs) tracetest.SpanStub {
	for _, s := range spans {
		if s.Name == pd.RequestSpan {
			return s
		}
	}
	return tracetest.SpanStub{}
}

// ttftOf is the client's TTFT of trace i (the requests ran one after the
// other, so their traces' order is theirs).
func ttftOf(t *testing.T, traces []tracetest.SpanStubs, ttfts []time.Duration, i int) time.Duration {
	require.Len(t, ttfts, len(traces))
	return ttfts[i]
}

func count(spans tracetest.SpanStubs, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

func only(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == name })
	require.GreaterOrEqual(t, i, 0, "no span %s among %v", name, names(spans))
	require.Equal(t, 1, count(spans, name), "spans %s among %v", name, names(spans))
	return spans[i]
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	assert.Equal(t, parent.SpanContext.SpanID(), child.Parent.SpanID(), "%s is a child of %s", child.Name, parent.Name)
}

func attr(k, v string) attribute.KeyValue { return attribute.String(k, v) }
