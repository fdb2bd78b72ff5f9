package server

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (docs/metrics.md, "Traces"): the engine continues the trace of
// an incoming request (W3C traceparent, as the proxy sends it) with one
// span per request, engine.prefill, engine.decode or engine.local, and
// hands its context to the connector's ranks (connector.Request.Context),
// whose spans of the request are its children. The decode span has a
// first_token event when the first token was generated, and every
// request's span an engine.first_token child: from when the request could
// start computing (admitted to prefill; decode: its KV in and verified) to
// its first token.

// traceScope is the instrumentation scope of the engine's spans.
const traceScope = "github.com/gonixl/gonixl/examples/engine"

// FirstTokenSpan is the name of the span from a request's start of compute
// to its first token.
const FirstTokenSpan = "engine.first_token"

// FirstTokenEvent is the name of the span event at a request's first
// generated token.
const FirstTokenEvent = "first_token"

// traceContext is the W3C trace-context propagator: what the proxy and the
// engines put in and read from traceparent, whatever the program's global
// propagator is.
var traceContext = propagation.TraceContext{}

// startSpan opens request r's span as a child of the trace hr carries (a
// root span when it carries none), and keeps its context in r.
func (s *Server) startSpan(hr *http.Request, r *request) trace.Span {
	tp := s.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx := traceContext.Extract(context.Background(), propagation.HeaderCarrier(hr.Header))
	ctx, span := tp.Tracer(traceScope).Start(ctx, "engine."+r.kind.String(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("gonixl.request_id", r.id), attribute.String("gonixl.engine_request_id", r.engID),
			attribute.Int("gonixl.prompt_tokens", len(r.tokens)), attribute.String("gonixl.role", s.cfg.Role)))
	if span.SpanContext().IsValid() {
		r.trace = ctx
	}
	return span
}

// endSpan ends a request's span, failed when the request was answered an
// error.
func endSpan(span trace.Span, err *apiError) {
	if err != nil {
		span.SetStatus(codes.Error, err.msg)
	}
	span.End()
}

// markCompute notes that a traced request can start computing now.
func (r *request) markCompute() {
	if r.trace != nil {
		r.computeFrom = time.Now()
	}
}

// firstTokenSpan records request r's engine.first_token span, ending now.
func (s *Server) firstTokenSpan(r *request) {
	if r.trace == nil || r.computeFrom.IsZero() {
		return
	}
	tp := s.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	_, span := tp.Tracer(traceScope).Start(r.trace, FirstTokenSpan, trace.WithTimestamp(r.computeFrom),
		trace.WithAttributes(attribute.String("gonixl.request_id", r.id)))
	span.End()
}
