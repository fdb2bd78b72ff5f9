package handshake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/internal/sidechannel"
)

// ErrFailed is matched by every handshake error that is not a refusal:
// unreachable side channel, deadline, bad reply.
var ErrFailed = errors.New("handshake: failed")

// Client fetches remote engines' payloads: once per engine, at most one
// fetch in flight per engine, each attempt bounded by Timeout.
type Client struct {
	hello    Hello
	timeout  time.Duration
	maxFrame int
	cache    sidechannel.Cache[*Payload]
}

// retryDelay spaces attempts at an engine whose ranks are still starting.
const retryDelay = 20 * time.Millisecond

// NewClient returns a client that introduces itself as engineID with local
// facts; timeout (> 0) bounds each handshake, retries included.
func NewClient(engineID string, local Compat, timeout time.Duration, maxFrame int) (*Client, error) {
	if err := local.Validate(); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("handshake: timeout must be positive, got %v", timeout)
	}
	return &Client{
		hello:    Hello{EngineID: engineID, Compat: local, Hash: local.Hash()},
		timeout:  timeout,
		maxFrame: maxFrame,
	}, nil
}

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
	for {
		p, retry, err := c.once(ctx, engineID, addr)
		if err == nil || !retry {
			return p, err
		}
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
	r, err := sidechannel.Call[Hello, Reply](ctx, addr, c.hello, c.maxFrame, c.timeout)
	if err != nil {
		return nil, false, fmt.Errorf("%w: engine %q at %s: %w", ErrFailed, engineID, addr, err)
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
	return p, false, nil
}
