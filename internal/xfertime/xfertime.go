// Package xfertime decides where a rank's transfer and post times come
// from: NIXL's own per-transfer telemetry (nixlAgent::getXferTelemetry,
// as vLLM's NIXL metrics take xferDuration and postDuration) where the
// agent captures it, the rank's own clock elsewhere. Two counters say
// which one timed each transfer, so the histograms' source is visible.
package xfertime

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// Sources, as a transfer span's gonixl.timed_by attribute names them.
const (
	ByNIXL      = "nixl"
	ByConnector = "connector"
)

// Telemetry states: not known until the first completed transfer's
// telemetry was asked for.
const (
	unknown int32 = iota
	on
	off
)

// Source is one rank's choice of timing. Safe for concurrent use; a nil
// *Source times everything on the rank's clock and counts nothing.
type Source struct {
	agent               nixl.TelemetryReader // nil: the agent has none
	state               atomic.Int32
	byNIXL, byConnector *stats.Counter
}

// New returns the Source of a rank acting through agent, counting into s.
func New(agent nixl.Agent, s *stats.Set) *Source {
	src := &Source{
		byNIXL:      s.Counter("transfers_timed_by_nixl", "Transfers whose transfer and post times came from NIXL's telemetry."),
		byConnector: s.Counter("transfers_timed_by_connector", "Transfers whose transfer time came from the connector's own clock (the agent captures no telemetry)."),
	}
	if r, ok := agent.(nixl.TelemetryReader); ok {
		src.agent = r
	} else {
		src.state.Store(off)
	}
	return src
}

// Times are a finished transfer's durations and where they came from.
type Times struct {
	Xfer time.Duration
	// Post is NIXL's time inside postXferReq; zero when By is ByConnector
	// (the rank recorded its own post time when it posted).
	Post time.Duration
	// Start is when NIXL saw the transfer posted; zero when By is
	// ByConnector.
	Start time.Time
	By    string
}

// Span returns when the transfer ran, for its span: as NIXL saw it, or
// Xfer ending now.
func (t Times) Span() (start, end time.Time) {
	if !t.Start.IsZero() {
		return t.Start, t.Start.Add(t.Xfer)
	}
	end = time.Now()
	return end.Add(-t.Xfer), end
}

// Finished returns the times of transfer h, complete and not yet
// released: NIXL's when the agent has them, else own (the rank's time
// from post to completion). It counts the source.
func (s *Source) Finished(h nixl.XferHandle, own time.Duration) Times {
	if s == nil {
		return Times{Xfer: own, By: ByConnector}
	}
	if s.state.Load() != off {
		t, err := s.agent.XferTelemetry(h)
		switch {
		case err == nil:
			s.state.Store(on)
			s.byNIXL.Inc()
			return Times{Xfer: t.XferDuration, Post: t.PostDuration, Start: t.Start, By: ByNIXL}
		case errors.Is(err, nixl.ErrNoTelemetry):
			s.state.Store(off) // the agent captures none: never ask again
		}
		// Any other error (a transfer the agent already forgot) times this
		// one on the rank's clock.
	}
	s.byConnector.Inc()
	return Times{Xfer: own, By: ByConnector}
}

// Own returns the times of a transfer the rank timed itself (one NIXL
// cannot time as one: a transfer of several requests), and counts it.
func (s *Source) Own(own time.Duration) Times {
	if s != nil {
		s.byConnector.Inc()
	}
	return Times{Xfer: own, By: ByConnector}
}

// PostsByNIXL reports whether NIXL's telemetry times the rank's posts (it
// gave a transfer's before): the rank then records its post time from
// Finished's Times, not its own. Until the first completed transfer, and
// on an agent without telemetry, the rank's own clock times them.
func (s *Source) PostsByNIXL() bool { return s != nil && s.state.Load() == on }
