package tracing

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// recorder is a TracerProvider that keeps every span it starts (the
// library has OpenTelemetry's API only, not its SDK).
type recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*span
}

type tracer struct {
	embedded.Tracer
	r *recorder
}

type span struct {
	noop.Span
	name       string
	parent, sc trace.SpanContext
	start, end time.Time
	ends       int
	status     codes.Code
}

func (r *recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{r: r} }

func (tr tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	r := tr.r
	r.mu.Lock()
	defer r.mu.Unlock()
	parent := trace.SpanContextFromContext(ctx)
	s := &span{name: name, parent: parent, start: cfg.Timestamp(),
		sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: trace.SpanID{byte(len(r.spans) + 10)}})}
	r.spans = append(r.spans, s)
	return trace.ContextWithSpan(ctx, s), s
}

func (s *span) SpanContext() trace.SpanContext   { return s.sc }
func (s *span) SetStatus(c codes.Code, _ string) { s.status = c }
func (s *span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.ends++
	s.end = cfg.Timestamp()
}
func (s *span) RecordError(error, ...trace.EventOption) {}

func traced() context.Context {
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
}

func TestBookRecordsChildrenOfTheRequestsSpan(t *testing.T) {
	rec := &recorder{}
	b := New(rec)
	b.Begin(traced(), "r1", KVWait)
	require.True(t, b.Traced("r1"))
	t0 := time.Unix(100, 0)
	b.Record("r1", Transfer, t0, t0.Add(time.Millisecond), nil)
	b.End("r1", errors.New("gone"))
	b.End("r1", nil) // ended once
	require.False(t, b.Traced("r1"))
	b.Record("r1", Post, t0, t0, nil) // after its end: nothing

	require.Len(t, rec.spans, 2)
	wait, xfer := rec.spans[0], rec.spans[1]
	assert.Equal(t, KVWait, wait.name)
	assert.Equal(t, trace.SpanID{2}, wait.parent.SpanID(), "the request's span is the engine's child")
	assert.Equal(t, 1, wait.ends)
	assert.Equal(t, codes.Error, wait.status)
	assert.Equal(t, Transfer, xfer.name)
	assert.Equal(t, wait.sc.SpanID(), xfer.parent.SpanID(), "a recorded span is the request's child")
	assert.Equal(t, t0, xfer.start)
	assert.Equal(t, t0.Add(time.Millisecond), xfer.end)
	assert.Equal(t, codes.Unset, xfer.status)
}

func TestBookWithoutTraceRecordsNothing(t *testing.T) {
	rec := &recorder{}
	b := New(rec)
	var unset context.Context // a connector.Request without a Context
	b.Begin(unset, "a", KVWait)
	b.Begin(context.Background(), "b", KVWait)
	b.Record("a", Transfer, time.Time{}, time.Time{}, nil)
	b.End("b", nil)
	assert.False(t, b.Traced("a"))
	assert.Empty(t, rec.spans)

	var none *Book
	none.Begin(traced(), "c", Hold)
	none.Record("c", Post, time.Time{}, time.Time{}, nil)
	none.End("c", nil)
	none.Close()
	assert.False(t, none.Traced("c"))
}

func TestBookCloseEndsWhatIsOpen(t *testing.T) {
	rec := &recorder{}
	b := New(rec)
	b.Begin(traced(), "r1", Hold)
	b.Begin(traced(), "r1", Hold) // already open: kept
	b.Close()
	require.Len(t, rec.spans, 1)
	assert.Equal(t, 1, rec.spans[0].ends)
	assert.False(t, b.Traced("r1"))
}
