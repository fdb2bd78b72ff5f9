// Package tracingtest is a TracerProvider that keeps every span it starts,
// for the tests of packages that record spans through OpenTelemetry's API
// (the library depends on the API only, not on its SDK and its in-memory
// exporter).
package tracingtest

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Recorder is a TracerProvider that keeps every span it starts. Safe for
// concurrent use.
type Recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*Span
}

// Span is a span as the Recorder kept it.
type Span struct {
	noop.Span
	r            *Recorder
	Name         string
	Parent, SC   trace.SpanContext
	Began, Ended time.Time
	Ends         int
	Status       codes.Code
	Attrs        map[attribute.Key]attribute.Value
}

type tracer struct {
	embedded.Tracer
	r *Recorder
}

// Tracer returns a tracer of the Recorder.
func (r *Recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{r: r} }

// Spans returns the spans started so far, in order; their fields are
// read safely once the spans ended.
func (r *Recorder) Spans() []*Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Span(nil), r.spans...)
}

// Named returns the spans of name.
func (r *Recorder) Named(name string) []*Span {
	var out []*Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	r := tr.r
	r.mu.Lock()
	defer r.mu.Unlock()
	parent := trace.SpanContextFromContext(ctx)
	s := &Span{r: r, Name: name, Parent: parent, Began: cfg.Timestamp(), Attrs: map[attribute.Key]attribute.Value{},
		SC: trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: spanID(len(r.spans) + 10)})}
	for _, a := range cfg.Attributes() {
		s.Attrs[a.Key] = a.Value
	}
	r.spans = append(r.spans, s)
	return trace.ContextWithSpan(ctx, s), s
}

func spanID(n int) trace.SpanID {
	var id trace.SpanID
	for i := range id {
		id[len(id)-1-i] = byte(n >> (8 * i))
	}
	return id
}

// SpanContext returns the span's own context.
func (s *Span) SpanContext() trace.SpanContext { return s.SC }

// SetStatus keeps the span's status code.
func (s *Span) SetStatus(c codes.Code, _ string) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.Status = c
}

// SetAttributes keeps the attributes.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	for _, a := range kv {
		s.Attrs[a.Key] = a.Value
	}
}

// End keeps the span's end, counting the calls.
func (s *Span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.Ends++
	s.Ended = cfg.Timestamp()
}

// RecordError records nothing.
func (s *Span) RecordError(error, ...trace.EventOption) {}

// Traced returns a context carrying a sampled remote span context, as an
// engine's request would carry its span.
func Traced() context.Context {
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
}
