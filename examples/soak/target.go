package main

import "time"

// The stack's parts, as the soak kills and restarts them.
const (
	partPrefill = "prefill"
	partDecode  = "decode"
	partProxy   = "proxy"
)

var parts = []string{partPrefill, partDecode, partProxy}

// target is one running serving stack (a prefill engine, a decode engine and
// the proxy) of one connector: in separate processes (procs.go) or in this
// process over real HTTP (inproc.go).
type target interface {
	// ProxyURL and EngineURL are base URLs; they stay the same across
	// restarts.
	ProxyURL() string
	EngineURL(part string) string
	// PID is the process of part, for RSS and open fds (in-process: this
	// process).
	PID(part string) int
	// Kill stops part at once: kill -9 of its process, or, in-process,
	// Close with a cancelled context (requests in flight cut, blocks
	// released) or the proxy's listener and connections closed.
	Kill(part string) error
	// Restart starts part again at the same addresses and waits until it
	// is healthy, within the given bound.
	Restart(part string, within time.Duration) error
	Close() error
}

// stackShape is what both kinds of target run: a small model (so that the
// KV of every request is checked quickly) at TP 2, with a modeled compute
// time that lets requests overlap.
type stackShape struct {
	Layers, KVHeads, HeadDim int
	TP, NumBlocks, MaxBatch  int
	Lease, RequestTimeout    time.Duration
	ProxyTimeout             time.Duration
	// HealthInterval is the proxy's health-check period, which is also
	// its health timeout (pd.Config.HealthTimeout's default).
	HealthInterval time.Duration
	ComputeScale   float64
	ServedModel    string
}

var defaultShape = stackShape{Layers: 2, KVHeads: 2, HeadDim: 16, TP: 2, NumBlocks: 128, MaxBatch: 16,
	Lease: 10 * time.Second, RequestTimeout: 20 * time.Second, ProxyTimeout: 40 * time.Second, HealthInterval: 2 * time.Second, ComputeScale: 0.25, ServedModel: "soak"}

func (s stackShape) geometry() geometry {
	return geometry{Layers: s.Layers, KVHeads: s.KVHeads, HeadDim: s.HeadDim, DTypeBytes: 2}
}
