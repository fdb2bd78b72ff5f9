package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
)

// Rank defaults that mean the same on both connectors.
const (
	// DefaultLease bounds how long prefill holds a request's finished
	// blocks for decode (vLLM's KV lease, VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
	DefaultLease = 30 * time.Second
	// DefaultPollInterval is the agent polling period while work waits
	// (vLLM's push writer polls every 1 ms).
	DefaultPollInterval = time.Millisecond
	// DefaultIdleInterval is the polling period otherwise; the native agent
	// needs progress for connection setup even when idle.
	DefaultIdleInterval = 50 * time.Millisecond
	// DefaultStatsInterval is the period of the "KV Transfer metrics:" line
	// when a Logger is set.
	DefaultStatsInterval = 10 * time.Second
)

// Duration is a duration field of a rank configuration, named as the user
// wrote it ("RankConfig.Lease").
type Duration struct {
	Field string
	Value time.Duration
}

// NotNegative reports the first negative duration, naming its field. It
// runs after the defaults are filled, so zero is never reported here.
func NotNegative(ds ...Duration) error {
	for _, d := range ds {
		if d.Value < 0 {
			return fmt.Errorf("%s is %v, want > 0", d.Field, d.Value)
		}
	}
	return nil
}

// CheckRank checks what a rank of this engine needs on either connector:
// an agent, and a valid layout whose TP size and block size are the
// engine's. The error names the field; the caller wraps it in its
// ErrInvalid.
func (e *Engine) CheckRank(agent nixl.Agent, l descriptors.Layout) error {
	switch {
	case agent == nil:
		return errors.New("RankConfig.Agent is nil")
	case l.TPSize != e.cfg.TPSize:
		return fmt.Errorf("RankConfig.Layout.TPSize is %d, engine %q has TP size %d", l.TPSize, e.cfg.EngineID, e.cfg.TPSize)
	case l.BlockSize != e.cfg.BlockSize:
		return fmt.Errorf("RankConfig.Layout.BlockSize is %d, engine %q has block size %d", l.BlockSize, e.cfg.EngineID, e.cfg.BlockSize)
	case l.Stages() != e.cfg.PPSize:
		return fmt.Errorf("RankConfig.Layout.PPSize is %d, engine %q has PP size %d", l.PPSize, e.cfg.EngineID, e.cfg.PPSize)
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("RankConfig.Layout: %v", err)
	}
	if e.cfg.Geometry != (descriptors.Geometry{}) {
		if err := e.cfg.Geometry.Check(l); err != nil {
			return fmt.Errorf("RankConfig.%s (engine %q)", Field(err), e.cfg.EngineID)
		}
	}
	return nil
}

// Field returns a descriptors validation error as the field it names and
// what is wrong with it ("Geometry.HeadDim is 0, want >= 1"), without the
// package's prefix, for a message that names the field as the user wrote it.
func Field(err error) string {
	return strings.TrimPrefix(err.Error(), "descriptors: ")
}

// Invalidf returns an error that wraps the connector's ErrInvalid, for
// configuration the connector checks itself.
func (e *Engine) Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", e.errInvalid, fmt.Sprintf(format, args...))
}

// PublishRank registers the rank's KV memory (layout l) with its agent and
// publishes the agent's metadata and the layout on the side channel, where
// peers fetch them in the handshake. On failure nothing stays registered.
func (e *Engine) PublishRank(agent nixl.Agent, l descriptors.Layout) error {
	_, err := e.Publish(agent, l)
	return err
}

// Publish is PublishRank that also returns the rank's incarnation, the
// random non-zero id the payload carries for this start of the rank
// (handshake.Rank.Incarnation), for connectors that put it in their own
// messages so the peer can tell them from an earlier instance's.
func (e *Engine) Publish(agent nixl.Agent, l descriptors.Layout) (uint64, error) {
	return e.PublishStaged(agent, l, nil)
}

// PublishStaged is Publish that also registers the rank's staging memory
// st (when st is enabled) before the metadata is taken, so peers can move
// bytes into and out of its slots, and advertises it in the payload. On
// failure nothing stays registered.
func (e *Engine) PublishStaged(agent nixl.Agent, l descriptors.Layout, st *staging.Config) (uint64, error) {
	world := l.WorldRank() // the TP rank without pipeline parallelism
	if err := e.Claim("published", world); err != nil {
		return 0, err
	}
	if err := agent.RegisterMem(l.RegList(), nil); err != nil {
		e.release("published", world)
		return 0, fmt.Errorf("%s: register KV memory of rank %d: %w", e.name, world, err)
	}
	var info *staging.Info
	if st != nil && st.Enabled() {
		if err := agent.RegisterMem(st.RegList(), nil); err != nil {
			_ = agent.DeregisterMem(l.RegList(), nil)
			e.release("published", world)
			return 0, fmt.Errorf("%s: register staging memory of rank %d: %w", e.name, world, err)
		}
		in := st.Info()
		info = &in
	}
	inc := NewIncarnation()
	md, err := agent.LocalMD()
	if err == nil {
		err = e.server.SetRank(handshake.Rank{TPRank: l.TPRank, PPRank: l.PPRank, Agent: agent.Name(), Metadata: md, Layout: l, Incarnation: inc, Staging: info})
	}
	if err != nil {
		if info != nil {
			_ = agent.DeregisterMem(st.RegList(), nil)
		}
		_ = agent.DeregisterMem(l.RegList(), nil)
		e.release("published", world)
		return 0, fmt.Errorf("%s: publish rank %d: %w", e.name, world, err)
	}
	return inc, nil
}

// Claim reserves a TP rank of this engine for one rank object of a kind
// ("published" for a rank on the side channel, which Publish claims
// itself; a connector names its other kinds): a second claim of a claimed
// rank is refused with the connector's ErrInvalid, and any claim on a
// closed engine with its ErrClosed. Withdraw releases it.
func (e *Engine) Claim(kind string, rank int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: engine %q was closed", e.errClosed, e.cfg.EngineID)
	}
	k := claim{kind, rank}
	if e.claimed[k] {
		return fmt.Errorf("%w: engine %q already has a rank %d: close it first", e.errInvalid, e.cfg.EngineID, rank)
	}
	if e.claimed == nil {
		e.claimed = map[claim]bool{}
	}
	e.claimed[k] = true
	return nil
}

type claim struct {
	kind string
	rank int
}

func (e *Engine) release(kind string, rank int) {
	e.mu.Lock()
	delete(e.claimed, claim{kind, rank})
	e.mu.Unlock()
}

// Withdraw takes a published rank off the side channel (clients are told
// to retry until it is published again) and releases its claim. rank is
// the world rank, descriptors.Layout.WorldRank (the TP rank without
// pipeline parallelism).
func (e *Engine) Withdraw(rank int) {
	e.server.ClearRank(rank)
	e.release("published", rank)
}

// Release releases a claim of another kind than "published".
func (e *Engine) Release(kind string, rank int) { e.release(kind, rank) }

// Closing marks a rank closed under its lock and reports whether this call
// did: false means an earlier Close did, and this one returns at once.
func Closing(mu sync.Locker, closed *bool) bool {
	mu.Lock()
	defer mu.Unlock()
	first := !*closed
	*closed = true
	return first
}

// Deregister takes a rank's KV memory, and its staging memory when st
// stages, off the rank's agent; the first error wins.
func Deregister(a nixl.Agent, l descriptors.Layout, st *staging.Config) error {
	err := a.DeregisterMem(l.RegList(), nil)
	if st != nil && st.Enabled() {
		if serr := a.DeregisterMem(st.RegList(), nil); err == nil {
			err = serr
		}
	}
	return err
}
