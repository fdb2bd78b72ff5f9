package pd

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (docs/metrics.md, "Traces"): each completion the proxy serves is
// one trace, rooted at the proxy.request span, which starts as the request
// arrives (continuing a traceparent the client sent) and has a first_token
// event, with gonixl.ttft_seconds, when decode's first bytes reach the
// client: the trace's TTFT, as llm-d's P/D sidecar reports it. Each leg is
// a child span, proxy.prefill_leg and proxy.decode_leg, from the request
// to the end of its answer, whose context goes to the engine in W3C
// traceparent; the engines' and their connectors' spans are its children.

// traceScope is the instrumentation scope of the proxy's spans.
const traceScope = "github.com/gonixl/gonixl/examples/proxy"

// Span and event names.
const (
	RequestSpan     = "proxy.request"
	FirstTokenEvent = "first_token"
	TTFTAttr        = attribute.Key("gonixl.ttft_seconds")
	// OverheadAttr is the part of the TTFT during which no leg was in
	// flight: the proxy's own time (legClock).
	OverheadAttr = attribute.Key("gonixl.coordinator_overhead_seconds")
)

var traceContext = propagation.TraceContext{}

type traceStartKey struct{}

func (p *Proxy) tracer() trace.Tracer {
	tp := p.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(traceScope)
}

// startTrace opens request r's root span; r comes back with it in its
// context, which every leg's context derives from.
func (p *Proxy) startTrace(r *http.Request) (*http.Request, trace.Span) {
	start := time.Now()
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := p.tracer().Start(ctx, RequestSpan, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.route", r.URL.Path)))
	if id := r.Header.Get("X-Request-Id"); id != "" {
		span.SetAttributes(attribute.String("gonixl.request_id", id))
	}
	return r.WithContext(context.WithValue(ctx, traceStartKey{}, start)), span
}

// traceFirstToken marks the trace's first token, at now.
func (c *completion) traceFirstToken(now time.Time) {
	ctx := c.r.Context()
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(FirstTokenEvent, trace.WithTimestamp(now))
	if start, ok := ctx.Value(traceStartKey{}).(time.Time); ok {
		span.SetAttributes(TTFTAttr.Float64(now.Sub(start).Seconds()),
			OverheadAttr.Float64(c.legs.overhead(start, now).Seconds()))
	}
}

// traceFailed marks the request's trace failed.
func (c *completion) traceFailed(le *legError) {
	span := trace.SpanFromContext(c.r.Context())
	span.SetAttributes(attribute.Int("http.response.status_code", le.status))
	span.SetStatus(codes.Error, le.msg)
}

// legSpan opens the span of a leg to engine e sent as req, puts its
// traceparent in req's headers and returns req with the span's context.
func (p *Proxy) legSpan(req *http.Request, e *engine) (*http.Request, trace.Span) {
	ctx, span := p.tracer().Start(req.Context(), "proxy."+e.role.String()+"_leg", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("server.address", e.url)))
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req.WithContext(ctx), span
}

// endLeg ends a leg's span, and calls done, when its answer's body is
// closed (at once when there is none).
func endLeg(span trace.Span, resp *http.Response, err error, done func()) {
	if err != nil {
		done()
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		span.SetStatus(codes.Error, resp.Status)
	}
	resp.Body = &legBody{ReadCloser: resp.Body, span: span, done: done}
}

// legBody ends its leg's span once closed.
type legBody struct {
	io.ReadCloser
	span trace.Span
	done func()
	once sync.Once
}

func (b *legBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		b.done()
		b.span.End()
	})
	return err
}
