package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of every span gonixl records.
const Scope = "github.com/gonixl/gonixl"

// Span names, as docs/metrics.md lists them.
const (
	// KVWait is a decode rank's wait for a request's KV: from Load (push:
	// the registration) to its Result.
	KVWait = "gonixl.kv_wait"
	// Hold is a prefill rank's hold of a request's blocks: from
	// RequestFinished to the blocks coming out of DrainFreed.
	Hold = "gonixl.hold"
	// Handshake is a request's wait for the side-channel handshake with
	// the remote engine it transfers with.
	Handshake = "gonixl.handshake"
	// Post is the posting of a request's transfers (descriptor mapping and
	// the post calls).
	Post = "gonixl.post"
	// Transfer is one transfer, from its post to its completion.
	Transfer = "gonixl.transfer"
)

// Attribute keys of the spans.
const (
	AttrRequestID = attribute.Key("gonixl.request_id")
	AttrRank      = attribute.Key("gonixl.remote_rank")
	AttrBytes     = attribute.Key("gonixl.bytes")
	AttrDescs     = attribute.Key("gonixl.descriptors")
	// AttrTimedBy says where a transfer span's durations come from:
	// "nixl" (the agent's telemetry) or "connector" (the rank's clock).
	AttrTimedBy  = attribute.Key("gonixl.timed_by")
	AttrPostTime = attribute.Key("gonixl.post_seconds")
)

// Book is a rank's spans of the requests it has, by request id. The zero
// of *Book (nil) records nothing. Safe for concurrent use.
type Book struct {
	tracer trace.Tracer
	mu     sync.Mutex
	open   map[string]entry
}

type entry struct {
	ctx  context.Context
	span trace.Span
}

// New returns a Book recording through tp (nil: otel's global provider).
func New(tp trace.TracerProvider) *Book {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Book{tracer: tp.Tracer(Scope), open: map[string]entry{}}
}

// Begin opens span name for request id as a child of the span in ctx; a
// ctx without a valid span context (nil included) opens nothing. A request
// already open keeps its span.
func (b *Book) Begin(ctx context.Context, id, name string, attrs ...attribute.KeyValue) {
	if b == nil || ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.open[id]; ok {
		return
	}
	attrs = append(attrs, AttrRequestID.String(id))
	ctx, span := b.tracer.Start(ctx, name, trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	b.open[id] = entry{ctx: ctx, span: span}
}

// Open opens span name for request id (Begin) and runs start, the call
// that hands the request to the rank; when start fails the request never
// began, and its span ends at once, failed. Otherwise the span ends with
// the request (End, EndAll).
func (b *Book) Open(ctx context.Context, id, name string, start func() error) error {
	b.Begin(ctx, id, name)
	err := start()
	if err != nil {
		b.End(id, err)
	}
	return err
}

// EndAll closes the spans of requests ids, which ended well.
func (b *Book) EndAll(ids []string) {
	for _, id := range ids {
		b.End(id, nil)
	}
}

// End closes request id's span, marking it failed with err when err is
// not nil. An id without a span does nothing.
func (b *Book) End(id string, err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	e, ok := b.open[id]
	delete(b.open, id)
	b.mu.Unlock()
	if !ok {
		return
	}
	if err != nil {
		e.span.RecordError(err)
		e.span.SetStatus(codes.Error, err.Error())
	}
	e.span.End()
}

// Record records a finished span name, from start to end, as a child of
// request id's span; an id without a span records nothing.
func (b *Book) Record(id, name string, start, end time.Time, err error, attrs ...attribute.KeyValue) {
	if b == nil {
		return
	}
	b.mu.Lock()
	e, ok := b.open[id]
	b.mu.Unlock()
	if !ok {
		return
	}
	_, span := b.tracer.Start(e.ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// Traced reports whether request id has a span, for a caller that would
// otherwise read a clock for nothing.
func (b *Book) Traced(id string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.open[id]
	return ok
}

// Close ends every span still open, as the rank closes.
func (b *Book) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	open := b.open
	b.open = map[string]entry{}
	b.mu.Unlock()
	for _, e := range open {
		e.span.End()
	}
}

// TransferAttrs are a transfer span's attributes: the remote rank, its
// bytes and descriptors, where its durations came from (by) and, when
// NIXL's telemetry timed it, NIXL's post time.
func TransferAttrs(rank int, bytes uint64, descs int, by string, post time.Duration) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrRank.Int(rank), AttrBytes.Int64(int64(bytes)), AttrDescs.Int(descs), AttrTimedBy.String(by)}
	if post > 0 {
		attrs = append(attrs, AttrPostTime.Float64(post.Seconds()))
	}
	return attrs
}
