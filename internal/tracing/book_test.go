package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/internal/tracing/tracingtest"
)

func TestBookRecordsChildrenOfTheRequestsSpan(t *testing.T) {
	rec := &tracingtest.Recorder{}
	b := tracing.New(rec)
	b.Begin(tracingtest.Traced(), "r1", tracing.KVWait)
	require.True(t, b.Traced("r1"))
	t0 := time.Unix(100, 0)
	b.Record("r1", tracing.Transfer, t0, t0.Add(time.Millisecond), nil)
	b.End("r1", errors.New("gone"))
	b.End("r1", nil) // ended once
	require.False(t, b.Traced("r1"))
	b.Record("r1", tracing.Post, t0, t0, nil) // after its end: nothing

	require.Len(t, rec.Spans(), 2)
	wait, xfer := rec.Spans()[0], rec.Spans()[1]
	assert.Equal(t, tracing.KVWait, wait.Name)
	assert.Equal(t, trace.SpanID{2}, wait.Parent.SpanID(), "the request's span is the engine's child")
	assert.Equal(t, 1, wait.Ends)
	assert.Equal(t, codes.Error, wait.Status)
	assert.Equal(t, tracing.Transfer, xfer.Name)
	assert.Equal(t, wait.SC.SpanID(), xfer.Parent.SpanID(), "a recorded span is the request's child")
	assert.Equal(t, t0, xfer.Began)
	assert.Equal(t, t0.Add(time.Millisecond), xfer.Ended)
	assert.Equal(t, codes.Unset, xfer.Status)
}

func TestBookWithoutTraceRecordsNothing(t *testing.T) {
	rec := &tracingtest.Recorder{}
	b := tracing.New(rec)
	var unset context.Context // a connector.Request without a Context
	b.Begin(unset, "a", tracing.KVWait)
	b.Begin(context.Background(), "b", tracing.KVWait)
	b.Record("a", tracing.Transfer, time.Time{}, time.Time{}, nil)
	b.End("b", nil)
	assert.False(t, b.Traced("a"))
	assert.Empty(t, rec.Spans())

	var none *tracing.Book
	none.Begin(tracingtest.Traced(), "c", tracing.Hold)
	none.Record("c", tracing.Post, time.Time{}, time.Time{}, nil)
	none.End("c", nil)
	none.Close()
	assert.False(t, none.Traced("c"))
}

func TestBookCloseEndsWhatIsOpen(t *testing.T) {
	rec := &tracingtest.Recorder{}
	b := tracing.New(rec)
	b.Begin(tracingtest.Traced(), "r1", tracing.Hold)
	b.Begin(tracingtest.Traced(), "r1", tracing.Hold) // already open: kept
	b.Close()
	require.Len(t, rec.Spans(), 1)
	assert.Equal(t, 1, rec.Spans()[0].Ends)
	assert.False(t, b.Traced("r1"))
}

func TestBookOpen(t *testing.T) {
	rec := &tracingtest.Recorder{}
	b := tracing.New(rec)
	require.NoError(t, b.Open(tracingtest.Traced(), "ok", tracing.KVWait, func() error { return nil }))
	require.True(t, b.Traced("ok"), "a started request keeps its span open")
	boom := errors.New("refused")
	require.ErrorIs(t, b.Open(tracingtest.Traced(), "bad", tracing.KVWait, func() error { return boom }), boom)
	require.False(t, b.Traced("bad"), "a refused request's span ends at once")
	b.EndAll([]string{"ok", "unknown"})
	require.False(t, b.Traced("ok"))
	spans := rec.Spans()
	require.Len(t, spans, 2)
	assert.Equal(t, codes.Unset, spans[0].Status)
	assert.Equal(t, codes.Error, spans[1].Status)
	assert.Equal(t, 1, spans[0].Ends)
	assert.Equal(t, 1, spans[1].Ends)
}
