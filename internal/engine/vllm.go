package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/internal/vllm"
)

// Protocols an engine speaks with its peers (Config.Protocol).
const (
	ProtocolGonixl = ""
	ProtocolVLLM   = "vllm"
)

// VLLMConfig is what an engine speaking vLLM's protocol puts on the wire
// beside its geometry: its compatibility hash (vllm.CompatFactors.Hash),
// the attention backend and layout names its metadata carries, and the
// connector version and layer names it speaks (Wire).
type VLLMConfig struct {
	Hash        string
	AttnBackend string
	KVLayout    string
	Wire        vllm.Wire
}

// ErrUnsupported is matched by a gonixl-only request made of a vLLM peer
// (a hold query or a pin).
var ErrUnsupported = errors.New("not part of vLLM's protocol")

// startVLLM starts e's side channel as vLLM runs it: a ZMQ ROUTER on
// cfg.ListenAddr serving each rank's NixlHandshakePayload, and a client that
// asks peers' side channels for theirs.
func startVLLM(e *Engine, cfg Config, conn Connector) error {
	if cfg.PPSize > 1 {
		// vLLM's side channel keys ranks by (pp, tp) and a stage's layers
		// by region names gonixl does not produce: not mapped yet.
		return fmt.Errorf("%w: EngineConfig.Geometry.PPSize is %d: pipeline-parallel ranks in vLLM's protocol are not supported (use gonixl's protocol)", conn.ErrInvalid, cfg.PPSize)
	}
	host, port, err := splitListen(cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("%w: EngineConfig.ListenAddr %q: %v", conn.ErrInvalid, cfg.ListenAddr, err)
	}
	srv, err := vllm.ListenSide(host, port, vllm.SideOptions{OnMalformed: func(error) { e.stats.MalformedFrames.Inc() }})
	if err != nil {
		return fmt.Errorf("%s: engine %q: vLLM side channel cannot listen on %s: %w", conn.Name, cfg.EngineID, cfg.ListenAddr, err)
	}
	e.server = &vllmPublisher{s: srv, engineID: cfg.EngineID, cfg: cfg.VLLM}
	e.client = &vllmClient{hash: cfg.VLLM.Hash, wire: cfg.VLLM.Wire, geometry: cfg.Geometry, timeout: cfg.HandshakeTimeout, now: cfg.Clock.Now}
	e.port = srv.Port()
	e.host = cfg.AdvertiseHost
	if e.host == "" {
		if h, _, err := net.SplitHostPort(srv.Addr()); err == nil {
			e.host = h
		}
	}
	return nil
}

func splitListen(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 0..65535", p)
	}
	return h, port, nil
}

// vllmPublisher serves ranks on vLLM's side channel.
type vllmPublisher struct {
	s        *vllm.SideServer
	engineID string
	cfg      VLLMConfig
}

func (p *vllmPublisher) SetRank(r handshake.Rank) error {
	if r.Staging != nil {
		return fmt.Errorf("rank %d: staging is gonixl's own protocol; vLLM's has none", r.TPRank)
	}
	return vllm.PublishRank(p.s, p.engineID, p.cfg.Hash, p.cfg.Wire, r.Layout, r.Metadata, p.cfg.AttnBackend, p.cfg.KVLayout)
}

func (p *vllmPublisher) ClearRank(tpRank int) { p.s.ClearPayload(0, tpRank) }

// RegistrationGeneration is what a prefill of connector version 15 or
// later writes as remote_registration_generation: how often its ranks'
// registrations changed (vllm.SideServer.Generation); 0 in gonixl's
// protocol and before version 15, where the key is not written.
func (e *Engine) RegistrationGeneration() int {
	p, ok := e.server.(*vllmPublisher)
	if !ok || !p.cfg.Wire.Version.HasRegistrationGeneration() {
		return 0
	}
	return p.s.Generation()
}

func (p *vllmPublisher) Close() error { return p.s.Close() }

// vllmClient fetches vLLM engines' ranks, once per engine, and gives them
// as a payload the connectors read as a gonixl one: no agent names (vLLM's
// metadata carries them inside; loading it names the agent), no pins.
type vllmClient struct {
	hash     string
	wire     vllm.Wire
	geometry descriptors.Geometry
	timeout  time.Duration
	now      func() time.Time
	cache    sidechannel.Cache[*handshake.Payload]
}

func (c *vllmClient) Get(ctx context.Context, engineID, addr string, tpSize int) (*handshake.Payload, error) {
	return c.cache.Get(ctx, key(engineID, addr), func(ctx context.Context) (*handshake.Payload, error) {
		return c.fetch(ctx, engineID, addr, tpSize)
	})
}

func key(engineID, addr string) string { return engineID + "@" + addr }

func (c *vllmClient) fetch(ctx context.Context, engineID, addr string, tpSize int) (*handshake.Payload, error) {
	host, port, err := splitListen(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: engine %q at %s: %v", handshake.ErrFailed, engineID, addr, err)
	}
	if tpSize < 1 || tpSize > handshake.MaxRanks {
		return nil, fmt.Errorf("%w: engine %q at %s: TP size %d, want 1..%d", handshake.ErrIncompatible, engineID, addr, tpSize, handshake.MaxRanks)
	}
	ranks := make([]int, tpSize)
	for i := range ranks {
		ranks[i] = i
	}
	peer, err := vllm.FetchPeer(ctx, host, port, engineID, c.hash, c.wire, c.geometry, tpSize, ranks, vllm.SideFetchOptions{Timeout: c.timeout})
	switch {
	case errors.Is(err, vllm.ErrIncompatible) || errors.Is(err, vllm.ErrUnsupported) || errors.Is(err, descriptors.ErrInvalid):
		return nil, fmt.Errorf("%w: engine %q at %s: %v", handshake.ErrIncompatible, engineID, addr, err)
	case err != nil:
		return nil, fmt.Errorf("%w: engine %q at %s: %v", handshake.ErrFailed, engineID, addr, err)
	}
	p := &handshake.Payload{EngineID: engineID, TPSize: tpSize, PPSize: 1, BlockSize: peer.Ranks[0].Layout.BlockSize}
	for _, r := range peer.Ranks {
		p.Ranks = append(p.Ranks, handshake.Rank{TPRank: r.TPRank, Metadata: r.AgentMetadata, Layout: r.Layout})
	}
	// The peer stamps its side channel with its monotonic clock, and a
	// deadline it gives is on that clock. The offset is expressed against
	// the engine's clock, so that a peer time t read as Unix seconds maps,
	// as a gonixl peer's does, to t - ClockOffset: peer time t is our
	// monotonic t - peer.Offset, which the engine clock reads now + that
	// minus the monotonic clock now.
	now, mono := c.now(), vllm.SideClock()
	p.ClockOffset = time.Unix(0, 0).Add(time.Duration((peer.Offset + mono) * float64(time.Second))).Sub(now)
	p.ClockUncertainty = peer.RTT / 2
	return p, nil
}

func (c *vllmClient) Forget(engineID, addr string) { c.cache.Forget(key(engineID, addr)) }

func (c *vllmClient) Extend(ctx context.Context, engineID, addr, _ string, _ []string) ([]time.Time, handshake.Clock, error) {
	return nil, handshake.Clock{}, fmt.Errorf("%w: hold queries to engine %q at %s", ErrUnsupported, engineID, addr)
}

func (c *vllmClient) Confirm(ctx context.Context, engineID, addr, _ string, _ []handshake.HoldRef) ([]string, handshake.Clock, error) {
	return nil, handshake.Clock{}, fmt.Errorf("%w: pins to engine %q at %s", ErrUnsupported, engineID, addr)
}

func (c *vllmClient) Ready(ctx context.Context, engineID, addr, _ string, _ handshake.ReadyQuery) ([]int, error) {
	return nil, fmt.Errorf("%w: readiness queries to engine %q at %s", ErrUnsupported, engineID, addr)
}

func (c *vllmClient) Close() {}
