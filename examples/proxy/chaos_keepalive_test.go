package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// deathRelay stands between the proxy and a decode engine and plays the engine's
// connections as a killed process leaves them: when the engine dies, a connection the
// proxy keeps alive is not seen closed until the proxy sends the next request on it, which
// then gets EOF before any answer byte; a connection with a request in flight is cut
// (after holdCut, the time the proxy's reads would take to see a reset); new connections
// are refused.
type deathRelay struct {
	ln       net.Listener
	upstream string
	dead     atomic.Bool
	holdCut  time.Duration
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newDeathRelay(t *testing.T, upstream string) *deathRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &deathRelay{ln: ln, upstream: upstream, holdCut: 300 * time.Millisecond, conns: map[net.Conn]bool{}}
	r.wg.Go(r.accept)
	t.Cleanup(r.close)
	return r
}

func (r *deathRelay) url() string { return "http://" + r.ln.Addr().String() }

func (r *deathRelay) accept() {
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.upstream)
		if err != nil {
			down.Close()
			continue
		}
		r.mu.Lock()
		r.conns[down] = true
		r.mu.Unlock()
		r.wg.Go(func() { r.relay(down, up) })
	}
}

// relay copies both ways. Once the engine is dead, bytes from the proxy close the
// connection (EOF before any answer), and the engine's close is not passed on: the proxy
// sees it only when it writes again, or after holdCut.
func (r *deathRelay) relay(down, up net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.conns, down)
		r.mu.Unlock()
		down.Close()
	}()
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		_, _ = io.Copy(down, up)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := down.Read(buf)
		if n > 0 && r.dead.Load() {
			up.Close()
			return // the request's bytes meet a dead engine: EOF, no answer byte
		}
		if n > 0 {
			if _, werr := up.Write(buf[:n]); werr != nil && r.dead.Load() {
				return
			}
		}
		if err != nil {
			up.Close()
			<-upDone
			return
		}
	}
}

// kill marks the engine dead and refuses new connections; the caller kills the engine.
// Every connection the engine had open is cut holdCut later unless the proxy wrote on it
// first.
func (r *deathRelay) kill() {
	r.dead.Store(true)
	r.ln.Close()
	time.AfterFunc(r.holdCut, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for c := range r.conns {
			_ = c.SetReadDeadline(time.Now()) // the read loop ends: the connection closes
		}
	})
}

func (r *deathRelay) close() {
	r.dead.Store(true)
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// TestChaosDecodeKilledKeepAlive kills a decode engine under load (its agent off the
// fabric, its HTTP server closed with no drain) while the proxy keeps connections to it
// alive. Requests the proxy sends on one of those after the death get EOF before any
// answer byte and before the engine said it took them in: they are retried on the other
// decode engine and succeed. Requests the dead engine had taken in (its 103 came) are not
// retried and fail clearly; new connections are refused and retried as before. Every
// request ends once, with a clear end, and no decoded request has wrong KV bytes.
func TestChaosDecodeKilledKeepAlive(t *testing.T) {
	const (
		requests = 200
		rate     = 100.0
	)
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	compute := server.ComputeModel{PrefillBase: time.Millisecond, DecodeBase: 20 * time.Millisecond}
	agents := map[string][]string{}
	var amu sync.Mutex
	newEngine := func(role, id string) *server.Server {
		s, err := server.New(server.Config{Role: role, Connector: "pull", EngineID: id, Model: chaosModel, Compute: compute,
			NumBlocks: 512, RequestTimeout: chaosEngineWait, Lease: chaosHold,
			NewAgent: func(name string) (nixl.Agent, error) {
				amu.Lock()
				agents[id] = append(agents[id], name)
				amu.Unlock()
				return fab.NewAgent(name)
			}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pre := newEngine(server.RolePrefill, "prefill-0")
	d0, d1 := newEngine(server.RoleDecode, "decode-0"), newEngine(server.RoleDecode, "decode-1")
	ref := newEngine(server.RoleDecode, "reference")
	httpc := &http.Client{Timeout: chaosClientWait, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer httpc.CloseIdleConnections()
	prompts, want := chaosPrompts(t, httpc, ref.URL(), 20)
	if err := ref.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	relay := newDeathRelay(t, strings.TrimPrefix(d0.URL(), "http://"))

	core, logs := observer.New(zap.InfoLevel)
	proxyTransport := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	defer proxyTransport.CloseIdleConnections()
	p, err := pd.New(pd.Config{Prefill: []string{pre.URL()}, Decode: []string{relay.url(), d1.URL()}, Connector: "pull",
		Policy: pd.PolicyLeastOutstanding, RequestTimeout: chaosProxyTimeout, HealthInterval: time.Second, Logger: zap.New(core),
		Client: &http.Client{Transport: proxyTransport}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go front.Serve(ln) //nolint:errcheck // ErrServerClosed at the end
	defer front.Close()
	proxyURL := "http://" + ln.Addr().String()
	waitHealthy(t, httpc, proxyURL, 10*time.Second)

	// Under load, then quiet: every request ended, and the proxy keeps its connections
	// to both decode engines alive. Then decode-0 dies as a crash kills it, and the load
	// starts again at once.
	// Before the kill every request ends clearly, and some succeed on each
	// decode engine's kept-alive connections. Not all must: on a machine too
	// busy to post a READ within the 3 s hold, a request fails with "prefill
	// hold expired", which is the right answer (the stress-ng run of the
	// README's test command saw 8 of 100).
	warm := sendLoadFrom(t, httpc, proxyURL, prompts, want, 0, requests/2, rate)
	if o := tallyResults(t, warm); o.counts[succeeded] == 0 || o.counts[succeeded]+o.counts[failedClearly] != requests/2 {
		o.report(t)
		t.Fatalf("before the kill %d of %d requests succeeded and %d failed clearly", o.counts[succeeded], requests/2, o.counts[failedClearly])
	}
	relay.kill()
	amu.Lock()
	names := agents["decode-0"]
	amu.Unlock()
	for _, a := range names {
		if err := fab.Disconnect(a); err != nil {
			t.Errorf("disconnecting %s: %v", a, err)
		}
	}
	dead, cancelDead := context.WithCancel(context.Background())
	cancelDead()
	_ = d0.Close(dead) // no drain: a crash
	results := append(warm, sendLoadFrom(t, httpc, proxyURL, prompts, want, requests/2, requests-requests/2, rate)...)
	out := tallyResults(t, results)
	out.report(t)

	byReason := map[string]int{}
	failedOver := map[string]bool{}
	for _, e := range logs.All() {
		var reason string
		switch e.Message {
		case "decode connection closed before it took the request in, retrying on another decode engine":
			reason = "closed"
		case "decode unreachable, retrying on another decode engine":
			reason = "unreachable"
		case "decode refused the request before reading KV, retrying on another decode engine":
			reason = "refused"
		default:
			continue
		}
		f := e.ContextMap()
		id := f["request_id"].(string)
		if failedOver[id] {
			t.Errorf("request %s failed over twice", id)
		}
		failedOver[id] = true
		byReason[reason]++
		if f["engine"] != relay.url() {
			t.Errorf("request %s failed over from %v, want the killed engine %s", id, f["engine"], relay.url())
		}
		i, err := strconv.Atoi(strings.TrimPrefix(id, "chaos-"))
		if err != nil || i >= requests {
			t.Fatalf("failover of request %q", id)
		}
		if o := outcome(results[i].outcome.Load()); o != succeeded {
			t.Errorf("request %s failed over (%s) and then ended %v: %s", id, reason, o, results[i].detail)
		}
	}
	st := p.Stats()
	var verifyFailures uint64
	for _, s := range []*server.Server{pre, d0, d1} {
		verifyFailures += s.Stats().KVVerifyFailures
	}
	t.Logf("%d requests: %d succeeded, %d failed clearly; failed over %v; proxy %+v",
		requests, out.counts[succeeded], out.counts[failedClearly], byReason, st)
	if byReason["closed"] == 0 {
		t.Errorf("no request failed over on a kept-alive connection closed under it (%v)", byReason)
	}
	if st.DecodeFailovers != uint64(len(failedOver)) || st.Retried < st.DecodeFailovers {
		t.Errorf("proxy counted %d decode failovers, %d retries; the log has %d", st.DecodeFailovers, st.Retried, len(failedOver))
	}
	if out.counts[succeeded]+out.counts[failedClearly] != requests {
		t.Errorf("%d succeeded and %d failed clearly, of %d", out.counts[succeeded], out.counts[failedClearly], requests)
	}
	if verifyFailures != 0 {
		t.Errorf("%d decoded requests read wrong KV bytes", verifyFailures)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := front.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	for _, s := range []*server.Server{d1, pre} {
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}

// The proxy asks with the header the engine answers.
func TestTakenInHeaderAgrees(t *testing.T) {
	if pd.TakenInHeader != server.TakenInHeader {
		t.Fatalf("proxy asks with %q, engine answers %q", pd.TakenInHeader, server.TakenInHeader)
	}
}
