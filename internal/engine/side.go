package engine

import (
	"context"
	"time"

	"github.com/gonixl/gonixl/internal/handshake"
)

// Client fetches peer engines' payloads: gonixl's handshake client, or, in
// vLLM's protocol, vLLM's side channel (vllmClient). tpSize is the peer's
// TP size as the request names it; gonixl's payload says it itself, vLLM's
// does not.
type Client interface {
	Get(ctx context.Context, engineID, addr string, tpSize int) (*handshake.Payload, error)
	Forget(engineID, addr string)
	// Extend and Confirm are gonixl's hold queries and pins; a vLLM peer
	// answers neither (its payload says Confirms false).
	Extend(ctx context.Context, engineID, addr, agent string, ids []string) ([]time.Time, handshake.Clock, error)
	Confirm(ctx context.Context, engineID, addr, agent string, refs []handshake.HoldRef) ([]string, handshake.Clock, error)
	// Ready is gonixl's readiness query of staged pull gathers; a vLLM
	// peer never names a slot, so it is never asked.
	Ready(ctx context.Context, engineID, addr, agent string, q handshake.ReadyQuery) ([]int, error)
	Close()
}

// publisher serves this engine's ranks to peers: gonixl's handshake server,
// or vLLM's side channel.
type publisher interface {
	SetRank(r handshake.Rank) error
	ClearRank(tpRank int)
	Close() error
}

// gonixlClient is handshake.Client as a Client.
type gonixlClient struct{ *handshake.Client }

func (c gonixlClient) Get(ctx context.Context, engineID, addr string, _ int) (*handshake.Payload, error) {
	return c.Client.Get(ctx, engineID, addr)
}

var (
	_ Client    = gonixlClient{}
	_ publisher = (*handshake.Server)(nil)
)
