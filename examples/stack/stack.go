package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Modes are the ways the stack can move KV: the pull connector with READs
// posted from its own goroutine, the pull connector with READs posted on the
// decode engine's loop (vLLM's NixlConnector today), and the push connector.
var Modes = []string{"pull", "pull-inline", "push"}

// Config is what one stack runs. Mode and Model are required.
type Config struct {
	// Mode is "pull", "pull-inline" or "push".
	Mode string
	// Model is both engines' KV geometry, Compute their modeled compute.
	Model   server.ModelSpec
	Compute server.ComputeModel
	// ServedModelName is the name clients send (default Model.Name).
	ServedModelName string
	// TPSize of both engines (default Model.TPSize, else 1).
	TPSize int
	// NumBlocks per rank of each engine (default the engine's).
	NumBlocks int
	// MaxBatch bounds the sequences a decode step runs (default the
	// engine's).
	MaxBatch int
	// Lease is how long prefill holds finished blocks for decode, and
	// RequestTimeout bounds each request's waits in the engines (defaults:
	// the engine's).
	Lease, RequestTimeout time.Duration
	// NewAgent makes the engines' agents. Nil: loopback agents on one fabric
	// whose links follow Link (the stack closes the fabric).
	NewAgent func(name string) (nixl.Agent, error)
	// Link is the loopback fabric's transfer model when NewAgent is nil.
	Link loopback.TransferModel
	// ProxyAddr is the proxy's listen address (default "127.0.0.1:0").
	ProxyAddr string
	// KVHook is the prefill engine's server.Config.KVHook (tests).
	KVHook func(requestID string, rank int, l descriptors.Layout, blocks []int, mem []byte)
}

// Stack is one running prefill engine, decode engine and proxy.
type Stack struct {
	Prefill, Decode *server.Server
	Proxy           *pd.Proxy
	http            *http.Server
	ln              net.Listener
	fabric          *loopback.Fabric
}

// ConnectorOf returns the engine connector and the decode Inline setting of
// a mode.
func ConnectorOf(mode string) (connector string, inline bool, err error) {
	switch mode {
	case "pull":
		return server.ConnPull, false, nil
	case "pull-inline":
		return server.ConnPull, true, nil
	case "push":
		return server.ConnPush, false, nil
	}
	return "", false, fmt.Errorf("mode %q: want pull, pull-inline or push", mode)
}

// Start starts a stack; Close stops it.
func Start(cfg Config) (_ *Stack, err error) {
	connector, inline, err := ConnectorOf(cfg.Mode)
	if err != nil {
		return nil, err
	}
	s := &Stack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	newAgent := cfg.NewAgent
	if newAgent == nil {
		if s.fabric, err = loopback.NewFabric(loopback.WithModel(cfg.Link)); err != nil {
			return nil, err
		}
		newAgent = func(name string) (nixl.Agent, error) { return s.fabric.NewAgent(name) }
	}
	base := server.Config{Connector: connector, Model: cfg.Model, Compute: cfg.Compute, ServedModelName: cfg.ServedModelName,
		TPSize: cfg.TPSize, NumBlocks: cfg.NumBlocks, MaxBatch: cfg.MaxBatch, NewAgent: newAgent,
		Lease: cfg.Lease, RequestTimeout: cfg.RequestTimeout}
	pc := base
	pc.Role, pc.EngineID, pc.KVHook = server.RolePrefill, "prefill-0", cfg.KVHook
	if s.Prefill, err = server.New(pc); err != nil {
		return nil, fmt.Errorf("prefill engine: %w", err)
	}
	dc := base
	dc.Role, dc.EngineID, dc.Inline = server.RoleDecode, "decode-0", inline
	if s.Decode, err = server.New(dc); err != nil {
		return nil, fmt.Errorf("decode engine: %w", err)
	}
	if s.Proxy, err = pd.New(pd.Config{Prefill: []string{s.Prefill.URL()}, Decode: []string{s.Decode.URL()}, Connector: connector}); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	addr := cfg.ProxyAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if s.ln, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.http = &http.Server{Handler: s.Proxy, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(s.ln) //nolint:errcheck // ends with ErrServerClosed at close
	return s, nil
}

// URL is the proxy's base URL, e.g. http://127.0.0.1:41234.
func (s *Stack) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the proxy, then the engines (draining what is in flight), then
// the loopback fabric. Calls after the first return nil.
func (s *Stack) Close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.http != nil {
		errs = append(errs, s.http.Shutdown(ctx))
		s.http = nil
	}
	if s.Proxy != nil {
		errs = append(errs, s.Proxy.Close())
		s.Proxy = nil
	}
	for _, e := range []**server.Server{&s.Decode, &s.Prefill} {
		if *e != nil {
			errs = append(errs, (*e).Close(ctx))
			*e = nil
		}
	}
	if s.fabric != nil {
		s.fabric.Close()
		s.fabric = nil
	}
	return errors.Join(errs...)
}
