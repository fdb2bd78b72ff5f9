package critbench

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Mode is the connector a run uses.
type Mode string

// Modes.
const (
	Pull       Mode = "pull"        // pullconn, READs posted by the reader goroutine
	PullInline Mode = "pull-inline" // pullconn with Inline: READs posted on the engine loop, as vLLM today
	Push       Mode = "push"        // pushconn
)

// Config describes one run.
type Config struct {
	Mode Mode
	// PrefillTP and DecodeTP are the engines' TP sizes (default 1 each);
	// each divides the model's 8 KV heads.
	PrefillTP, DecodeTP int
	// Requests is the batch size; BlocksPerRequest the blocks each
	// request fills on prefill (default 4), BlockSize the block size
	// (default 16) on both engines.
	Requests         int
	BlocksPerRequest int
	BlockSize        int
	// Rate is the arrival rate in requests per second; 0 starts all at
	// once. Arrivals are fixed-interval.
	Rate float64
	// PrefillTime is the simulated prefill compute: the time from a
	// request's arrival (when push decode registers) to RequestFinished.
	PrefillTime time.Duration
	// Handoff is the time, in pull mode, from prefill's answer to decode
	// calling Load: the proxy's round trip and decode scheduling the
	// request. Push has none on its critical path, since decode registered
	// when the request arrived. Zero models a proxy-less, in-process
	// handoff, which favours pull.
	Handoff time.Duration
	// Link models the loopback fabric (default instant). Ignored with
	// NewAgent.
	Link loopback.TransferModel
	// NewAgent, when set, creates every rank's agent (e.g. native NIXL
	// agents); by default they are loopback agents on one fabric.
	NewAgent func(name string) (nixl.Agent, error)
	// Timeout bounds the whole run (default 30 s).
	Timeout time.Duration
}

// Model geometry: 2 layers, 8 KV heads of 32 bytes per token.
const (
	numLayers  = 2
	modelHeads = 8
	headBytes  = 32
)

func (c *Config) defaults() error {
	if c.PrefillTP == 0 {
		c.PrefillTP = 1
	}
	if c.DecodeTP == 0 {
		c.DecodeTP = 1
	}
	if c.BlocksPerRequest == 0 {
		c.BlocksPerRequest = 4
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	switch {
	case c.Mode != Pull && c.Mode != PullInline && c.Mode != Push:
		return fmt.Errorf("critbench: mode %q is not %q, %q or %q", c.Mode, Pull, PullInline, Push)
	case c.Requests < 1:
		return fmt.Errorf("critbench: requests must be at least 1, got %d", c.Requests)
	case modelHeads%c.PrefillTP != 0 || modelHeads%c.DecodeTP != 0:
		return fmt.Errorf("critbench: TP sizes %d and %d must divide %d heads", c.PrefillTP, c.DecodeTP, modelHeads)
	case c.Rate < 0 || c.PrefillTime < 0 || c.Handoff < 0:
		return fmt.Errorf("critbench: rate %v, prefill time %v and handoff %v must not be negative", c.Rate, c.PrefillTime, c.Handoff)
	}
	return nil
}
