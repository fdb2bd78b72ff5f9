package main

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
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stackConfig is what one stack runs.
type stackConfig struct {
	mode      string // "pull", "pull-inline" or "push"
	model     server.ModelSpec
	compute   server.ComputeModel
	served    string
	tp        int
	numBlocks int
	link      loopback.TransferModel
	proxyAddr string // "127.0.0.1:0" unless serving
	// kvHook is the prefill engine's server.Config.KVHook (tests).
	kvHook func(requestID string, rank int, l descriptors.Layout, blocks []int, mem []byte)
}

// stack is one prefill engine, one decode engine and the proxy, all on
// 127.0.0.1 over real HTTP, as three processes would run them.
type stack struct {
	prefill, decode *server.Server
	proxy           *pd.Proxy
	http            *http.Server
	ln              net.Listener
	closeAgents     func()
	agentKind       string
}

func connectorOf(mode string) (connector string, inline bool, err error) {
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

func startStack(cfg stackConfig) (_ *stack, err error) {
	connector, inline, err := connectorOf(cfg.mode)
	if err != nil {
		return nil, err
	}
	newAgent, closeAgents, kind, err := agents(cfg.link)
	if err != nil {
		return nil, err
	}
	s := &stack{closeAgents: closeAgents, agentKind: kind}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	base := server.Config{Connector: connector, Model: cfg.model, Compute: cfg.compute, ServedModelName: cfg.served,
		TPSize: cfg.tp, NumBlocks: cfg.numBlocks, NewAgent: newAgent}
	pc := base
	pc.Role, pc.EngineID, pc.KVHook = server.RolePrefill, "prefill-0", cfg.kvHook
	if s.prefill, err = server.New(pc); err != nil {
		return nil, fmt.Errorf("prefill engine: %w", err)
	}
	dc := base
	dc.Role, dc.EngineID, dc.Inline = server.RoleDecode, "decode-0", inline
	if s.decode, err = server.New(dc); err != nil {
		return nil, fmt.Errorf("decode engine: %w", err)
	}
	if s.proxy, err = pd.New(pd.Config{Prefill: []string{s.prefill.URL()}, Decode: []string{s.decode.URL()}, Connector: connector}); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if s.ln, err = net.Listen("tcp", cfg.proxyAddr); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.http = &http.Server{Handler: s.proxy, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(s.ln) //nolint:errcheck // ends with ErrServerClosed at close
	return s, nil
}

// url is the proxy's base URL.
func (s *stack) url() string { return "http://" + s.ln.Addr().String() }

// close stops the proxy, then the engines (draining what is in flight), then
// the agents.
func (s *stack) close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.http != nil {
		errs = append(errs, s.http.Shutdown(ctx))
	}
	if s.proxy != nil {
		errs = append(errs, s.proxy.Close())
	}
	for _, e := range []*server.Server{s.decode, s.prefill} {
		if e != nil {
			errs = append(errs, e.Close(ctx))
		}
	}
	if s.closeAgents != nil {
		s.closeAgents()
	}
	return errors.Join(errs...)
}
