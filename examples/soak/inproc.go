package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/examples/stack"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// inproc is the stack in this process: loopback agents cannot reach another
// process, so the engines and the proxy run here, each on its own 127.0.0.1
// port over real HTTP, as examples/stack runs them.
type inproc struct {
	connector string
	fabric    *loopback.Fabric
	cfg       map[string]server.Config
	engines   map[string]*server.Server
	proxy     *pd.Proxy
	proxySrv  *http.Server
	proxyAddr string
	shape     stackShape
}

func startInproc(connector string, shape stackShape) (_ *inproc, err error) {
	t := &inproc{connector: connector, cfg: map[string]server.Config{}, engines: map[string]*server.Server{}, shape: shape}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.fabric, err = loopback.NewFabric(); err != nil {
		return nil, err
	}
	m, compute, _ := server.Preset("qwen2.5-7b")
	m.Layers, m.KVHeads, m.HeadDim, m.TPSize = shape.Layers, shape.KVHeads, shape.HeadDim, shape.TP
	scale := func(d *time.Duration) { *d = time.Duration(float64(*d) * shape.ComputeScale) }
	scale(&compute.PrefillBase)
	scale(&compute.PrefillPerToken)
	scale(&compute.PrefillPerToken2)
	scale(&compute.DecodeBase)
	scale(&compute.DecodePerSeq)
	for _, part := range []string{partPrefill, partDecode} {
		c := server.Config{Role: part, Connector: connectorOf(connector), EngineID: connector + "-" + part, Model: m, Compute: compute,
			ServedModelName: shape.ServedModel, NumBlocks: shape.NumBlocks, MaxBatch: shape.MaxBatch,
			Lease: shape.Lease, RequestTimeout: shape.RequestTimeout,
			NewAgent: func(name string) (nixl.Agent, error) { return t.fabric.NewAgent(name) }}
		progressive(connector, part, &c)
		e, err := server.New(c)
		if err != nil {
			return nil, fmt.Errorf("%s engine: %w", part, err)
		}
		t.engines[part] = e
		// A restart binds the same HTTP and side channel ports.
		c.HTTPAddr = e.URL()[len("http://"):]
		c.SideChannelPort = e.Info().SideChannelPort
		t.cfg[part] = c
	}
	t.proxyAddr = "127.0.0.1:0"
	if err := t.startProxy(time.Minute); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *inproc) startProxy(within time.Duration) error {
	p, err := pd.New(pd.Config{Prefill: []string{t.EngineURL(partPrefill)}, Decode: []string{t.EngineURL(partDecode)},
		Connector: connectorOf(t.connector), RequestTimeout: t.shape.ProxyTimeout, HealthInterval: t.shape.HealthInterval, StartWait: within})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	ln, err := net.Listen("tcp", t.proxyAddr)
	if err != nil {
		p.Close()
		return fmt.Errorf("proxy: %w", err)
	}
	t.proxy, t.proxyAddr = p, ln.Addr().String()
	t.proxySrv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go t.proxySrv.Serve(ln) //nolint:errcheck // ErrServerClosed at Kill or Close
	return nil
}

func (t *inproc) ProxyURL() string             { return "http://" + t.proxyAddr }
func (t *inproc) EngineURL(part string) string { return "http://" + t.cfg[part].HTTPAddr }
func (t *inproc) PID(string) int               { return os.Getpid() }

func (t *inproc) Kill(part string) error {
	if part == partProxy {
		if t.proxySrv == nil {
			return errors.New("proxy: not running")
		}
		err := t.proxySrv.Close() // the listener and every connection, at once
		t.proxy.Close()
		t.proxySrv, t.proxy = nil, nil
		return err
	}
	e := t.engines[part]
	if e == nil {
		return fmt.Errorf("%s: not running", part)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain: requests in flight are cut short, blocks released
	delete(t.engines, part)
	if err := e.Close(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: close: %w", part, err)
	}
	return nil
}

func (t *inproc) Restart(part string, within time.Duration) error {
	if part == partProxy {
		return t.startProxy(within)
	}
	deadline := time.Now().Add(within)
	for {
		e, err := server.New(t.cfg[part])
		if err == nil {
			t.engines[part] = e
			return stack.WaitHealthy(context.Background(), t.EngineURL(part)+"/health", time.Until(deadline))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: restart at %s: %w", part, t.cfg[part].HTTPAddr, err)
		}
		time.Sleep(200 * time.Millisecond) // the port may linger a moment
	}
}

func (t *inproc) Close() error {
	var errs []error
	if t.proxySrv != nil {
		errs = append(errs, t.proxySrv.Close())
		t.proxy.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e := t.engines[partDecode]; e != nil {
		errs = append(errs, e.Close(ctx))
	}
	if e := t.engines[partPrefill]; e != nil {
		errs = append(errs, e.Shutdown(ctx, server.ShutdownOptions{HoldDrain: -1}))
	}
	if t.fabric != nil {
		t.fabric.Close()
	}
	return errors.Join(errs...)
}
