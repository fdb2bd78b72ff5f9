package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/discovery/etcdtest"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// chaosSize is the load of TestChaos: GONIXL_CHAOS=long runs the full 2,000 requests per
// connector, the default a shorter run of the same schedule.
func chaosSize() (requests int, rate float64) {
	if os.Getenv("GONIXL_CHAOS") == "long" {
		return 2000, 100
	}
	return 400, 100
}

// chaosSeed is the schedule's seed: $GONIXL_CHAOS_SEED, default 1.
func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("GONIXL_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GONIXL_CHAOS_SEED %q: %v", s, err)
		}
		return v
	}
	return 1
}

// The engines of the chaos test: a small model, little compute, short waits.
var (
	chaosModel   = server.ModelSpec{Name: "chaos-toy", Layers: 2, KVHeads: 2, HeadDim: 16, DTypeBytes: 2, BlockSize: 16, TPSize: 1}
	chaosCompute = server.ComputeModel{PrefillBase: time.Millisecond, DecodeBase: 3 * time.Millisecond}
)

const (
	chaosTTL          = time.Second      // registration lease
	chaosHold         = 3 * time.Second  // prefill: how long finished blocks wait for decode
	chaosEngineWait   = 5 * time.Second  // engine: bound of a request's waits
	chaosProxyTimeout = 10 * time.Second // proxy: bound of each leg
	chaosClientWait   = 30 * time.Second // client: a request still open then hangs
	chaosMaxTokens    = 8
)

// slot is one engine id: the instance serving under it, if any.
type slot struct {
	role, id string

	mu     sync.Mutex
	srv    *server.Server
	reg    *discovery.Registration
	agent  string // the instance's agent
	alive  bool
	starts int
}

// cluster is the chaos test's engines, registry and fabric.
type cluster struct {
	t      *testing.T
	mode   string
	fab    *loopback.Fabric
	cli    *clientv3.Client
	name   string
	slots  []*slot
	killed map[string]int // by kind of kill

	mu      sync.Mutex
	retired []server.Stats // dead instances' last counters
}

func (c *cluster) start(s *slot) error {
	s.mu.Lock()
	gen := s.starts + 1
	s.mu.Unlock()
	var agent string
	cfg := server.Config{Role: s.role, Connector: c.mode, EngineID: s.id, Model: chaosModel, Compute: chaosCompute,
		NumBlocks: 256, RequestTimeout: chaosEngineWait, Lease: chaosHold,
		NewAgent: func(name string) (nixl.Agent, error) {
			// Every start has its own agent name, as vLLM's agents (a uuid each) and the
			// engine command's: the engine id stays.
			agent = fmt.Sprintf("%s.%d", name, gen)
			return c.fab.NewAgent(agent)
		}}
	srv, err := server.New(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", s.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := discovery.Register(ctx, discovery.RegisterConfig{Client: c.cli, Cluster: c.name, Record: srv.Record(), TTL: chaosTTL})
	if err != nil {
		_ = srv.Close(ctx)
		return fmt.Errorf("%s: %w", s.id, err)
	}
	s.mu.Lock()
	s.srv, s.reg, s.agent, s.alive = srv, reg, agent, true
	s.starts++
	s.mu.Unlock()
	return nil
}

// kill ends s's instance as a crash would: its agent drops off the fabric (transfers to
// and from it fail), its listener and connections close at once with no drain, and its
// registration is revoked (revoke) or left to expire with the lease.
func (c *cluster) kill(s *slot, revoke bool) {
	s.mu.Lock()
	srv, reg, agent := s.srv, s.reg, s.agent
	s.alive = false
	s.mu.Unlock()
	if err := c.fab.Disconnect(agent); err != nil {
		c.t.Errorf("disconnecting %s: %v", s.id, err)
	}
	if revoke {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := reg.Close(ctx); err != nil {
			c.t.Errorf("revoking %s: %v", s.id, err)
		}
		cancel()
	} else {
		reg.Abandon()
	}
	dead, cancel := context.WithCancel(context.Background())
	cancel()            // no drain at all
	_ = srv.Close(dead) // says the drain was cut short
	c.mu.Lock()
	c.retired = append(c.retired, srv.Stats())
	c.mu.Unlock()
}

// alive returns the live slots of role.
func (c *cluster) alive(role string) []*slot {
	var out []*slot
	for _, s := range c.slots {
		s.mu.Lock()
		if s.role == role && s.alive {
			out = append(out, s)
		}
		s.mu.Unlock()
	}
	return out
}

// outcome is how one client request ended.
type outcome int32

const (
	pending outcome = iota
	succeeded
	failedClearly // an HTTP error with a JSON message, or an SSE error event
	unclear       // anything else: a transport error, a cut stream, wrong text
)

type result struct {
	outcome atomic.Int32
	detail  string
}

// end records o; a second end of the same request is an error.
func (r *result) end(t *testing.T, id int, o outcome, detail string) {
	if !r.outcome.CompareAndSwap(int32(pending), int32(o)) {
		t.Errorf("request %d ended twice (%v then %v: %s)", id, outcome(r.outcome.Load()), o, detail)
		return
	}
	r.detail = detail
}

func TestChaos(t *testing.T) {
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) { chaos(t, mode) })
	}
}

// chaos runs 3 prefill and 2 decode engines and the proxy in this process, over loopback
// agents, a real etcd and real HTTP on 127.0.0.1, sends requests at a steady rate and kills
// and restarts engines on a seeded schedule.
func chaos(t *testing.T, mode string) {
	srvEtcd := etcdtest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	requests, rate := chaosSize()
	seed := chaosSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srvEtcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	c := &cluster{t: t, mode: mode, fab: fab, cli: cli, name: "chaos-" + mode, killed: map[string]int{}}
	for i := range 3 {
		c.slots = append(c.slots, &slot{role: server.RolePrefill, id: fmt.Sprintf("prefill-%d", i)})
	}
	for i := range 2 {
		c.slots = append(c.slots, &slot{role: server.RoleDecode, id: fmt.Sprintf("decode-%d", i)})
	}
	for _, s := range c.slots {
		if err := c.start(s); err != nil {
			t.Fatal(err)
		}
	}

	// The text every prompt must get, from an engine serving it alone (no KV moved).
	ref, err := server.New(server.Config{Role: server.RoleDecode, Connector: mode, EngineID: "reference", Model: chaosModel,
		NumBlocks: 64, NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
	if err != nil {
		t.Fatal(err)
	}
	httpc := &http.Client{Timeout: chaosClientWait, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer httpc.CloseIdleConnections()
	prompts, want := chaosPrompts(t, httpc, ref.URL(), 40)
	if err := ref.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The proxy, following the registry, as the command runs it.
	p, err := pd.New(pd.Config{Dynamic: true, Connector: mode, Policy: pd.PolicyLeastOutstanding,
		RequestTimeout: chaosProxyTimeout, HealthInterval: 200 * time.Millisecond, Client: &http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: 256, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}}})
	if err != nil {
		t.Fatal(err)
	}
	stopFollowing, err := followRegistry(p, srvEtcd.Endpoint, c.name, 10*time.Second, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go front.Serve(ln) //nolint:errcheck // ErrServerClosed at the end
	proxyURL := "http://" + ln.Addr().String()
	waitHealthy(t, httpc, proxyURL, 10*time.Second)

	// The chaos: every 200-600 ms an engine is killed, of each role in turn, keeping one of
	// each role alive; it comes back under its id 300-1500 ms later.
	loadDone := make(chan struct{})
	var restarts sync.WaitGroup
	chaosDone := make(chan struct{})
	var restartErrs atomic.Int64
	go func() {
		defer close(chaosDone)
		for k := 0; ; k++ {
			pause := time.Duration(200+rng.IntN(400)) * time.Millisecond
			back := time.Duration(300+rng.IntN(1200)) * time.Millisecond
			revoke := rng.IntN(2) == 0
			role := server.RolePrefill
			if k%2 == 1 {
				role = server.RoleDecode
			}
			pick := rng.IntN(3)
			select {
			case <-loadDone:
				return
			case <-time.After(pause):
			}
			live := c.alive(role)
			if len(live) < 2 {
				continue
			}
			s := live[pick%len(live)]
			c.kill(s, revoke)
			kind := "lease expired"
			if revoke {
				kind = "lease revoked"
			}
			c.killed[role+", "+kind]++
			restarts.Go(func() {
				time.Sleep(back)
				if err := c.start(s); err != nil {
					restartErrs.Add(1)
					t.Errorf("restarting %s: %v", s.id, err)
				}
			})
		}
	}()

	// The load: requests at a steady rate, half of them streamed.
	start := time.Now()
	results := sendLoad(t, httpc, proxyURL, prompts, want, requests, rate)
	close(loadDone)
	<-chaosDone
	restarts.Wait()
	loadTime := time.Since(start)

	// Every block of every live engine comes back: decode's when its request ended,
	// prefill's when decode read them, the request was cancelled, or the hold ran out.
	// Push decode keeps the blocks of a request whose prefill engine died with its
	// registration until PUSH_CANCEL_ACK or its cancel timeout (a WRITE might still land):
	// the engine does not set it, so it is the connector's default.
	var held int
	drainFor := chaosDrainFor(mode)
	drainStart := time.Now()
	deadline := drainStart.Add(drainFor)
	for {
		held = 0
		var where []string
		for _, s := range c.slots {
			s.mu.Lock()
			if s.alive {
				st := s.srv.Stats()
				held += st.BlocksInUse
				if st.BlocksInUse > 0 {
					where = append(where, fmt.Sprintf("%s: %+v", s.id, st))
				}
			}
			s.mu.Unlock()
		}
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("blocks held: %s", strings.Join(where, "; "))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	drained := time.Since(drainStart)
	out := tallyResults(t, results)
	st := p.Stats()
	killed := 0
	for _, n := range c.killed {
		killed += n
	}
	t.Logf("chaos %s (seed %d): %d requests in %s at %.0f/s: %d succeeded, %d failed with a clear error, %d unclear; proxy: %d retried, %d failed; engines killed: %d %v; blocks left held: %d (after %s)",
		mode, seed, requests, loadTime.Round(time.Millisecond), rate, out.counts[succeeded], out.counts[failedClearly], out.counts[unclear],
		st.Retried, st.Failed, killed, c.killed, held, drained.Round(time.Millisecond))
	out.report(t)
	if held != 0 {
		t.Errorf("%d blocks still held on live engines after %s", held, drainFor)
	}
	if st.Requests != uint64(requests) {
		t.Errorf("proxy saw %d requests, the clients sent %d", st.Requests, requests)
	}
	if st.Failed > uint64(out.counts[failedClearly]) {
		t.Errorf("proxy failed %d requests, the clients saw %d errors", st.Failed, out.counts[failedClearly])
	}
	// How many succeed depends on how fast killed engines come back, which
	// is the machine's speed (165 of 400 beside stress-ng and three test
	// suites, over 300 on a quiet machine); what the test holds to is that
	// every request ended clearly, above, and that the stack served.
	if out.counts[succeeded] == 0 {
		t.Errorf("no request of %d succeeded", requests)
	}
	if c.killed[server.RolePrefill+", lease revoked"]+c.killed[server.RolePrefill+", lease expired"] == 0 ||
		c.killed[server.RoleDecode+", lease revoked"]+c.killed[server.RoleDecode+", lease expired"] == 0 {
		t.Errorf("the schedule killed %v: want prefill and decode engines killed", c.killed)
	}

	// Shut down: the proxy, then the engines gracefully.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := front.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	stopFollowing()
	p.Close()
	var verifyFailures uint64
	for _, s := range c.slots {
		if s.alive {
			if err := s.reg.Close(ctx); err != nil {
				t.Error(err)
			}
			if err := s.srv.Close(ctx); err != nil {
				t.Errorf("closing %s: %v", s.id, err)
			}
			verifyFailures += s.srv.Stats().KVVerifyFailures
		}
	}
	for _, st := range c.retired {
		verifyFailures += st.KVVerifyFailures
	}
	if verifyFailures != 0 {
		t.Errorf("%d decoded requests read wrong KV bytes", verifyFailures)
	}
}

var digits = regexp.MustCompile(`[0-9]+`)

// chaosPrompts returns n prompts of 1 to 4 blocks of 16 tokens and the
// text each must get, as the engine at url serves it alone (no KV moved).
func chaosPrompts(t *testing.T, httpc *http.Client, url string, n int) (prompts, want []string) {
	t.Helper()
	prompts, want = make([]string, n), make([]string, n)
	for i := range prompts {
		prompts[i] = strings.TrimSpace(strings.Repeat(fmt.Sprintf("chaos prompt %d ", i), 1+i%12))
		st, text, err := complete(httpc, url, prompts[i], false, "ref-"+strconv.Itoa(i))
		if err != nil || st != 200 || text == "" {
			t.Fatalf("reference text of prompt %d: %d %q %v", i, st, text, err)
		}
		want[i] = text
	}
	return prompts, want
}

// waitHealthy waits up to within for the proxy at url to see a prefill
// and a decode engine.
func waitHealthy(t *testing.T, httpc *http.Client, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !healthy(httpc, url) {
		if time.Now().After(deadline) {
			t.Fatal("the proxy never saw a prefill and a decode engine")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chaosDrainFor is how long the chaos tests wait for every block of the
// live engines to come back (the wait ends as soon as they have). Push
// decode keeps the blocks of a request whose prefill engine died with its
// registration until PUSH_CANCEL_ACK or
// its cancel timeout (a WRITE might still land): the engine does not set
// it, so it is the connector's default.
func chaosDrainFor(mode string) time.Duration {
	if mode == "push" {
		return pushconn.DefaultCancelTimeout + chaosEngineWait + 10*time.Second
	}
	// Pull: a hold a decode engine pinned (its READs posted) is kept until
	// the pin ends, whatever its lease, when that engine dies or aborts the
	// load before its completion: TransferTimeout + ExpiryMargin after the
	// pin (the engine sets neither).
	return chaosHold + pullconn.DefaultTransferTimeout + pullconn.DefaultExpiryMargin + chaosEngineWait + 10*time.Second
}

// outcomes is how the requests of a chaos run ended: a count per outcome,
// the clear errors (numbers blanked) with their counts, and the first ten
// requests without a clear end.
type outcomes struct {
	counts  map[outcome]int
	whys    map[string]int
	unclear []string
}

func tallyResults(t *testing.T, results []result) outcomes {
	t.Helper()
	o := outcomes{counts: map[outcome]int{}, whys: map[string]int{}}
	for i := range results {
		k := outcome(results[i].outcome.Load())
		o.counts[k]++
		if k == failedClearly {
			o.whys[digits.ReplaceAllString(results[i].detail, "N")]++
		}
		if k == unclear && len(o.unclear) < 10 {
			o.unclear = append(o.unclear, fmt.Sprintf("request %d: %s", i, results[i].detail))
		}
	}
	return o
}

// report logs the clear errors and fails the test for a request without
// a clear end or one that never ended.
func (o outcomes) report(t *testing.T) {
	t.Helper()
	for why, n := range o.whys {
		t.Logf("  %4d × %s", n, why)
	}
	if len(o.unclear) > 0 {
		t.Errorf("requests without a clear end: %s", strings.Join(o.unclear, "; "))
	}
	if o.counts[pending] != 0 {
		t.Errorf("%d requests never ended", o.counts[pending])
	}
}

func healthy(c *http.Client, url string) bool {
	resp, err := c.Get(url + "/healthcheck")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// clearError is an error answer that says what went wrong.
type clearError struct {
	status int
	msg    string
}

func (e *clearError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

// complete sends one completion and returns its text. An error answer with a message, or
// a stream ending with an error event, is a *clearError; anything else is another error.
func complete(c *http.Client, base, prompt string, stream bool, id string) (int, string, error) {
	body, _ := json.Marshal(map[string]any{"model": chaosModel.Name, "prompt": prompt, "max_tokens": chaosMaxTokens, "stream": stream})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return resp.StatusCode, "", err
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Message == "" {
			return resp.StatusCode, "", fmt.Errorf("error answer without a message: %q", raw)
		}
		return resp.StatusCode, "", &clearError{resp.StatusCode, e.Error.Message}
	}
	if !stream {
		var v struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Choices) != 1 {
			return 200, "", fmt.Errorf("answer is not a completion: %v", err)
		}
		return 200, v.Choices[0].Text, nil
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return 200, text.String(), nil
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			continue // the partial line a broken stream leaves before its error event
		}
		if ev.Error != nil {
			return 200, "", &clearError{ev.Error.Code, "in the stream: " + ev.Error.Message}
		}
		for _, ch := range ev.Choices {
			text.WriteString(ch.Text)
		}
	}
	return 200, "", fmt.Errorf("stream ended without [DONE] or an error event: %v", sc.Err())
}

// sendLoad sends requests through the proxy at a steady rate, half of them
// streamed, each checked against the reference text of its prompt, and
// returns their outcomes once every one ended.
func sendLoad(t *testing.T, httpc *http.Client, proxyURL string, prompts, want []string, requests int, rate float64) []result {
	return sendLoadFrom(t, httpc, proxyURL, prompts, want, 0, requests, rate)
}

// sendLoadFrom is sendLoad with request ids from "chaos-<first>" on; results[i] is
// request first+i.
func sendLoadFrom(t *testing.T, httpc *http.Client, proxyURL string, prompts, want []string, first, requests int, rate float64) []result {
	results := make([]result, requests)
	var clients sync.WaitGroup
	start := time.Now()
	for i := range requests {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		clients.Go(func() {
			pi := i % len(prompts)
			st, text, err := complete(httpc, proxyURL, prompts[pi], i%2 == 0, "chaos-"+strconv.Itoa(first+i))
			var ce *clearError
			switch {
			case err == nil && st == 200 && text == want[pi]:
				results[i].end(t, i, succeeded, "")
			case err == nil && st == 200:
				results[i].end(t, i, unclear, fmt.Sprintf("text %q, want %q", text, want[pi]))
			case errors.As(err, &ce):
				results[i].end(t, i, failedClearly, ce.Error())
			default:
				results[i].end(t, i, unclear, fmt.Sprintf("status %d: %v", st, err))
			}
		})
	}
	clients.Wait()
	return results
}

// TestChaosDecodeFailover closes a decode engine under load, with a short drain: while it
// drains it answers 503 to new requests, then it cuts the ones in flight (they had read
// their KV), then its port refuses connections. The requests it refused, or that could not
// reach it, or whose connection it closed before it took them in, are retried on the other
// decode engine and succeed; none it had taken in is retried (failover.go in package pd).
func TestChaosDecodeFailover(t *testing.T) {
	const (
		requests = 200
		rate     = 100.0
		closeAt  = 600 * time.Millisecond
		drain    = 150 * time.Millisecond
	)
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	compute := server.ComputeModel{PrefillBase: time.Millisecond, DecodeBase: 20 * time.Millisecond} // 160 ms a request
	newEngine := func(role, id string) *server.Server {
		s, err := server.New(server.Config{Role: role, Connector: "pull", EngineID: id, Model: chaosModel, Compute: compute,
			NumBlocks: 512, RequestTimeout: chaosEngineWait, Lease: chaosHold,
			NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
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

	core, logs := observer.New(zap.InfoLevel)
	p, err := pd.New(pd.Config{Prefill: []string{pre.URL()}, Decode: []string{d0.URL(), d1.URL()}, Connector: "pull",
		Policy: pd.PolicyLeastOutstanding, RequestTimeout: chaosProxyTimeout, HealthInterval: time.Second, Logger: zap.New(core),
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}}})
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

	closed := make(chan error, 1)
	time.AfterFunc(closeAt, func() {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		closed <- d0.Close(ctx) // says the drain was cut short
	})
	results := sendLoad(t, httpc, proxyURL, prompts, want, requests, rate)
	<-closed
	out := tallyResults(t, results)
	out.report(t) // every request ended once, each with a clear end; logs the errors

	// The failovers, from the proxy's log: why, and which request.
	failedOver := map[string]string{}
	for _, e := range logs.All() {
		closedUnder := e.Message == "decode connection closed before it took the request in, retrying on another decode engine"
		if e.Message != "decode refused the request before reading KV, retrying on another decode engine" &&
			e.Message != "decode unreachable, retrying on another decode engine" && !closedUnder {
			continue
		}
		f := e.ContextMap()
		id, why := f["request_id"].(string), f["error"].(string)
		if _, dup := failedOver[id]; dup {
			t.Errorf("request %s failed over twice", id)
		}
		failedOver[id] = why
		if f["engine"] != d0.URL() {
			t.Errorf("request %s failed over from %v, want the closed engine %s", id, f["engine"], d0.URL())
		}
		// Only a request decode-0 never took in: refused with one of its 503s
		// for a closing engine (the HTTP handler's, before the request is
		// queued, or the loop's, before it has blocks), or no connection.
		// Or its connection closed before it said it took the request in (its 103).
		if !strings.Contains(why, "answered 503: engine closing") && !strings.Contains(why, "answered 503: The engine is closing") &&
			!strings.Contains(why, "connection refused") && !closedUnder {
			t.Errorf("request %s failed over after %q, which may follow a READ", id, why)
		}
	}
	refused, unreachable := 0, 0
	for id, why := range failedOver {
		if strings.Contains(why, "503") {
			refused++
		} else {
			unreachable++
		}
		i, err := strconv.Atoi(strings.TrimPrefix(id, "chaos-"))
		if err != nil || i >= requests {
			t.Fatalf("failover of request %q", id)
		}
		if o := outcome(results[i].outcome.Load()); o != succeeded {
			t.Errorf("request %s failed over and then ended %v: %s", id, o, results[i].detail)
		}
	}
	st := p.Stats()
	var verifyFailures uint64
	for _, s := range []*server.Server{pre, d0, d1} {
		verifyFailures += s.Stats().KVVerifyFailures
	}
	t.Logf("%d requests: %d succeeded, %d failed clearly (taken in by the closed engine, not retried); failed over: %d refused (503), %d unreachable; proxy %+v",
		requests, out.counts[succeeded], out.counts[failedClearly], refused, unreachable, st)
	if len(failedOver) == 0 || refused == 0 {
		t.Errorf("failed over %d requests (%d refused): want some refused while the engine drained", len(failedOver), refused)
	}
	if st.DecodeFailovers != uint64(len(failedOver)) || st.Retried != st.DecodeFailovers {
		t.Errorf("proxy counted %d decode failovers, %d retries; the log has %d", st.DecodeFailovers, st.Retried, len(failedOver))
	}
	if st.Requests != requests || out.counts[succeeded]+out.counts[failedClearly] != requests {
		t.Errorf("proxy saw %d requests; %d succeeded and %d failed, of %d", st.Requests, out.counts[succeeded], out.counts[failedClearly], requests)
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
