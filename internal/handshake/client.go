package handshake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gonixl/gonixl/internal/sidechannel"
)

// ErrFailed is matched by every handshake error that is not a refusal:
// unreachable side channel, deadline, bad reply.
var ErrFailed = errors.New("handshake failed")

// Client fetches remote engines' payloads: once per engine, at most one
// fetch in flight per engine, each attempt bounded by Timeout.
type Client struct {
	hello    Hello
	timeout  time.Duration
	maxFrame int
	now      func() time.Time
	cache    sidechannel.Cache[*Payload]
	// conns keeps connections for confirmations and hold queries, which
	// are on pull's critical path or frequent.
	conns sidechannel.Pool
}

// Close closes the connections the client keeps. It is idempotent; later
// calls still work, each on a connection of its own.
func (c *Client) Close() { c.conns.Close() }

// retryDelay spaces attempts at an engine whose ranks are still starting.
const retryDelay = 20 * time.Millisecond

// NewClient returns a client that introduces itself as engineID with local
// facts; timeout (> 0) bounds each handshake, retries included.
func NewClient(engineID string, local Compat, timeout time.Duration, maxFrame int) (*Client, error) {
	if err := local.Validate(); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("timeout must be positive, got %v", timeout)
	}
	return &Client{
		hello:    Hello{EngineID: engineID, Compat: local, Hash: local.Hash()},
		timeout:  timeout,
		maxFrame: maxFrame,
		now:      time.Now,
	}, nil
}

// SetClock makes the client measure clock offsets with now (the engine's
// clock) instead of time.Now. Call it before the first Get.
func (c *Client) SetClock(now func() time.Time) { c.now = now }

func key(engineID, addr string) string { return engineID + "@" + addr }

// Get returns the payload of engine engineID served at addr ("host:port"),
// fetching it unless a previous Get succeeded. Errors match ErrIncompatible
// (refused either way) or ErrFailed, and name the engine and address.
func (c *Client) Get(ctx context.Context, engineID, addr string) (*Payload, error) {
	return c.cache.Get(ctx, key(engineID, addr), func(ctx context.Context) (*Payload, error) {
		return c.fetch(ctx, engineID, addr)
	})
}

// Peek returns the payload if a Get for it already succeeded.
func (c *Client) Peek(engineID, addr string) (*Payload, bool) {
	return c.cache.Peek(key(engineID, addr))
}

// Forget drops a fetched payload, so the next Get handshakes again (the
// remote engine restarted or its agents disconnected).
func (c *Client) Forget(engineID, addr string) { c.cache.Forget(key(engineID, addr)) }

func (c *Client) fetch(ctx context.Context, engineID, addr string) (*Payload, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var waiting error // the last "not ready" answer: what the deadline cut short
	for {
		p, retry, err := c.once(ctx, engineID, addr)
		if err != nil && !retry && waiting != nil && ctx.Err() != nil {
			// The deadline ended an attempt after the engine said it was
			// starting: that is what the caller needs to hear, not the
			// last dial's timeout.
			return nil, fmt.Errorf("%w: engine %q at %s: %v (gave up after %v: %w; the last attempt: %v)", ErrFailed, engineID, addr, waiting, c.timeout, ctx.Err(), err)
		}
		if err == nil || !retry {
			return p, err
		}
		waiting = err
		t := time.NewTimer(retryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: engine %q at %s: %v (gave up after %v: %w)", ErrFailed, engineID, addr, err, c.timeout, ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Client) once(ctx context.Context, engineID, addr string) (*Payload, bool, error) {
	sent := c.now()
	r, err := sidechannel.Call[Hello, Reply](ctx, addr, c.hello, c.maxFrame, c.timeout)
	got := c.now()
	if err != nil {
		return nil, false, fmt.Errorf("%w: engine %q at %s: %w", ErrFailed, engineID, addr, plain(err))
	}
	// Our own view first, so the message reads local/remote from here.
	if err := Check(c.hello.Compat, r.Compat, r.Hash); err != nil {
		return nil, false, fmt.Errorf("engine %q at %s: %w", engineID, addr, err)
	}
	if r.Error != "" {
		if r.Retry {
			return nil, true, errors.New(r.Error)
		}
		return nil, false, fmt.Errorf("%w: engine %q at %s refused: %s", ErrIncompatible, engineID, addr, r.Error)
	}
	if r.Payload == nil {
		return nil, false, fmt.Errorf("%w: engine %q at %s sent neither a payload nor an error", ErrFailed, engineID, addr)
	}
	p := r.Payload
	if err := p.Validate(); err != nil {
		return nil, false, fmt.Errorf("%w: engine %q at %s: %v", ErrFailed, engineID, addr, err)
	}
	if p.EngineID != engineID {
		return nil, false, fmt.Errorf("%w: side channel %s serves engine %q, expected engine %q", ErrFailed, addr, p.EngineID, engineID)
	}
	if p.Hash != r.Hash || p.Compat != r.Compat {
		return nil, false, fmt.Errorf("%w: engine %q at %s: payload compat differs from the reply's", ErrFailed, engineID, addr)
	}
	if r.Now != 0 {
		// The server read its clock somewhere between sent and got.
		m := measure(sent, got, r.Now)
		p.ClockOffset, p.ClockUncertainty = m.Offset, m.Uncertainty
	}
	return p, false, nil
}

// Extend asks engine engineID at addr to extend its holds of the request
// ids (at most MaxExtendIDs) and returns, per id, the deadline every rank
// of that engine now holds it until on the local clock, conservatively
// converted with the offset this exchange measured; the zero time where
// the engine does not hold it. Nothing is cached.
func (c *Client) Extend(ctx context.Context, engineID, addr, agent string, ids []string) ([]time.Time, Clock, error) {
	h := c.hello
	h.Extend, h.Agent = ids, agent
	// Safe to repeat: a second extension of the same holds changes only
	// their deadlines, which the answer reports.
	r, sent, got, err := c.ask(ctx, "hold query", engineID, addr, h)
	switch {
	case err != nil:
		return nil, Clock{}, err
	case len(r.Holds) != len(ids):
		return nil, Clock{}, fmt.Errorf("%w: hold query to engine %q at %s: %d answers for %d ids", ErrFailed, engineID, addr, len(r.Holds), len(ids))
	case r.Now == 0:
		return nil, Clock{}, fmt.Errorf("%w: hold query to engine %q at %s: reply carries no clock", ErrFailed, engineID, addr)
	}
	// The server read its clock, and extended the holds, at some moment
	// between sent and got: a remote deadline d is certain to be no earlier
	// than sent + (d - now_remote) on the local clock.
	remoteNow := time.Unix(0, r.Now)
	out := make([]time.Time, len(ids))
	for i, ns := range r.Holds {
		if ns > 0 {
			out[i] = sent.Add(time.Unix(0, ns).Sub(remoteNow))
		}
	}
	return out, measure(sent, got, r.Now), nil
}

// ask sends one hold query or confirmation (what, for messages) over a
// kept connection and checks the reply's compatibility facts and error; it
// returns the reply and the local clock's readings around the exchange.
func (c *Client) ask(ctx context.Context, what, engineID, addr string, h Hello) (Reply, time.Time, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sent := c.now()
	r, err := sidechannel.CallPooled[Hello, Reply](ctx, &c.conns, addr, h, c.maxFrame, c.timeout)
	got := c.now()
	if err != nil {
		return r, sent, got, fmt.Errorf("%w: %s to engine %q at %s: %w", ErrFailed, what, engineID, addr, plain(err))
	}
	if err := Check(c.hello.Compat, r.Compat, r.Hash); err != nil {
		return r, sent, got, fmt.Errorf("engine %q at %s: %w", engineID, addr, err)
	}
	if r.Error != "" {
		return r, sent, got, fmt.Errorf("%w: %s to engine %q at %s refused: %s", ErrFailed, what, engineID, addr, r.Error)
	}
	return r, sent, got, nil
}

// Clock is one exchange's estimate of a remote engine's clock: Offset is
// its clock minus ours, and Uncertainty the half round trip the exchange
// cannot resolve. Each hold query and confirmation measures it afresh, so
// a clock that stepped since the handshake is seen at the next exchange.
type Clock struct {
	Offset, Uncertainty time.Duration
}

// measure estimates the offset from a reply stamped remoteNow (Unix
// nanoseconds) that was asked for at sent and arrived at got. The local
// readings come from the engine's clock; with the system clock their
// difference is monotonic (time.Time keeps the monotonic reading), so a
// step of the local wall clock between them cannot shrink the round trip.
func measure(sent, got time.Time, remoteNow int64) Clock {
	mid := sent.Add(got.Sub(sent) / 2)
	return Clock{Offset: time.Unix(0, remoteNow).Sub(mid), Uncertainty: got.Sub(sent)/2 + time.Microsecond}
}

// Confirm asks engine engineID at addr whether it still holds each of refs
// for this engine (see Hello.Confirm), as agent, and returns one verdict
// per hold ("" confirmed, else why not) and the clock estimate of the
// exchange. A hold is confirmed only by an answer: every error means
// "not confirmed". At most MaxConfirmHolds refs.
func (c *Client) Confirm(ctx context.Context, engineID, addr, agent string, refs []HoldRef) ([]string, Clock, error) {
	h := c.hello
	h.Confirm, h.Agent = refs, agent
	// Safe to repeat: a second pin of a hold by the same engine only
	// extends it, and one the first copy could not pin is refused again.
	r, sent, got, err := c.ask(ctx, "confirmation", engineID, addr, h)
	switch {
	case err != nil:
		return nil, Clock{}, err
	case len(r.Verdicts) != len(refs):
		return nil, Clock{}, fmt.Errorf("%w: confirmation to engine %q at %s: %d verdicts for %d holds", ErrFailed, engineID, addr, len(r.Verdicts), len(refs))
	}
	var clk Clock
	if r.Now != 0 {
		clk = measure(sent, got, r.Now)
	}
	return r.Verdicts, clk, nil
}

// plainError is a side-channel error with the internal package's name taken
// out of its text, so the connectors' messages name only public packages;
// errors.Is and errors.As still see the original.
type plainError struct {
	err error
	msg string
}

func (e plainError) Error() string { return e.msg }
func (e plainError) Unwrap() error { return e.err }

func plain(err error) error {
	return plainError{err: err, msg: strings.ReplaceAll(err.Error(), "sidechannel: ", "")}
}
