package xfertime

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// telemetryAgent answers XferTelemetry with tel or err; the rest of
// nixl.Agent is never called.
type telemetryAgent struct {
	nixl.Agent
	tel   nixl.XferTelemetry
	err   error
	calls int
}

func (a *telemetryAgent) XferTelemetry(nixl.XferHandle) (nixl.XferTelemetry, error) {
	a.calls++
	return a.tel, a.err
}

func TestFinishedTakesNIXLTelemetry(t *testing.T) {
	s := stats.New()
	start := time.Unix(100, 0)
	a := &telemetryAgent{tel: nixl.XferTelemetry{Start: start, XferDuration: 7 * time.Millisecond, PostDuration: 2 * time.Millisecond}}
	src := New(a, s)
	require.False(t, src.PostsByNIXL(), "unknown until a transfer's telemetry was read")
	got := src.Finished(1, time.Second)
	require.Equal(t, Times{Xfer: 7 * time.Millisecond, Post: 2 * time.Millisecond, Start: start, By: ByNIXL}, got)
	require.True(t, src.PostsByNIXL())
	require.Equal(t, uint64(1), get(s, "transfers_timed_by_nixl"))
	require.Equal(t, uint64(0), get(s, "transfers_timed_by_connector"))
}

func TestFinishedWithoutTelemetryStopsAsking(t *testing.T) {
	s := stats.New()
	a := &telemetryAgent{err: &nixl.Error{Op: "nixlAgent::getXferTelemetry", Status: nixl.StatusNoTelemetry}}
	src := New(a, s)
	require.Equal(t, Times{Xfer: time.Second, By: ByConnector}, src.Finished(1, time.Second))
	require.Equal(t, Times{Xfer: 2 * time.Second, By: ByConnector}, src.Finished(2, 2*time.Second))
	require.Equal(t, 1, a.calls, "ErrNoTelemetry: the agent captures none, never asked again")
	require.False(t, src.PostsByNIXL())
	require.Equal(t, uint64(2), get(s, "transfers_timed_by_connector"))
}

func TestFinishedOtherErrorTimesOneTransferOwn(t *testing.T) {
	s := stats.New()
	a := &telemetryAgent{err: errors.New("transfer forgotten")}
	src := New(a, s)
	require.Equal(t, ByConnector, src.Finished(1, time.Second).By)
	a.err, a.tel = nil, nixl.XferTelemetry{XferDuration: time.Millisecond}
	require.Equal(t, ByNIXL, src.Finished(2, time.Second).By, "a passing error does not turn telemetry off")
	require.Equal(t, 2, a.calls)
}

func TestAgentWithoutTelemetryReader(t *testing.T) {
	s := stats.New()
	src := New(struct{ nixl.Agent }{}, s)
	require.Equal(t, Times{Xfer: time.Second, By: ByConnector}, src.Finished(1, time.Second))
	require.Equal(t, Times{Xfer: 0, By: ByConnector}, src.Own(0))
	require.Equal(t, uint64(2), get(s, "transfers_timed_by_connector"))
	var none *Source
	require.Equal(t, ByConnector, none.Finished(1, time.Second).By)
	require.False(t, none.PostsByNIXL())
}

func get(s *stats.Set, name string) uint64 {
	v, _ := s.Snapshot().Get(name)
	return v
}
