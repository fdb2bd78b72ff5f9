package engine

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/lease"
)

// DefaultHandshakeTimeout bounds one side-channel handshake (vLLM: 5 s).
const DefaultHandshakeTimeout = 5 * time.Second

// Config describes the local engine: who it is, where its side channel
// listens and what a peer must agree with.
type Config struct {
	// EngineID names the engine; peers address it by this id, and pull
	// Params carry it as remote_engine_id.
	EngineID string
	// ListenAddr is the side channel's listen address (default
	// "127.0.0.1:0", a free loopback port).
	ListenAddr string
	// AdvertiseHost is the host peers reach the side channel at (default:
	// the listen address's host).
	AdvertiseHost string
	// Model and DType identify the model and the KV-cache element type;
	// KVLayout names the KV-cache layout (default "HND"). A peer engine
	// must agree on all three.
	Model    string
	DType    string
	KVLayout string
	// TPSize is the engine's tensor-parallel size; BlockSize its KV block
	// size in tokens. Every rank's layout must agree.
	TPSize    int
	BlockSize int
	// PPSize is the engine's pipeline-parallel size (default 1): a rank
	// of stage s holds that stage's layers (descriptors.Layout.PPRank).
	PPSize int
	// Geometry, when set, is the engine's KV-cache geometry, which every
	// rank's layout must be a layout of; DType, TPSize and BlockSize are
	// then its own.
	Geometry descriptors.Geometry
	// Protocol is the wire the engine speaks with its peers:
	// ProtocolGonixl (gonixl's own side channel) or ProtocolVLLM (vLLM's
	// NIXL connector, version 12, with VLLM's facts).
	Protocol string
	VLLM     VLLMConfig
	// HandshakeTimeout bounds each handshake with a peer engine, retries
	// included (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// Clock is the engine's time source (default: the wall clock). The
	// side channel stamps its handshake replies with it, the handshake
	// client measures clock offsets with it, and ranks use it unless their
	// own configuration names a clock; give ranks no other clock than this.
	Clock lease.Clock
	// Logger receives side-channel warnings (default: none).
	Logger *zap.Logger
}

// withDefaults validates c and fills its zero fields. The error names the
// first unusable field; the caller wraps it in its ErrInvalid.
func (c *Config) withDefaults() error {
	switch {
	case c.EngineID == "":
		return errors.New("EngineConfig.EngineID is empty")
	case c.TPSize < 1:
		return fmt.Errorf("EngineConfig.TPSize is %d, want >= 1", c.TPSize)
	case c.PPSize < 0:
		return fmt.Errorf("EngineConfig.Geometry.PPSize is %d, want >= 0", c.PPSize)
	case c.BlockSize < 1:
		return fmt.Errorf("EngineConfig.BlockSize is %d, want >= 1", c.BlockSize)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("EngineConfig.HandshakeTimeout is %v, want > 0", c.HandshakeTimeout)
	case c.Model == "":
		return errors.New("EngineConfig.Model is empty")
	case c.DType == "":
		return errors.New("EngineConfig.DType is empty")
	}
	c.PPSize = max(c.PPSize, 1)
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:0"
	}
	switch c.KVLayout {
	case "":
		c.KVLayout = "HND"
	case "HND":
	default:
		// Blocks are mapped head-major (descriptors.Layout); another
		// layout would move the wrong bytes.
		return fmt.Errorf("EngineConfig.KVLayout is %q: only \"HND\" is supported (token-major NHD blocks are Geometry.Order = descriptors.OrderNHD, with KVLayout left \"HND\")", c.KVLayout)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = lease.SystemClock{}
	}
	return nil
}
