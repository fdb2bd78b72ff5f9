// Package pd is the prefill/decode proxy of the reference disaggregated serving stack: it
// takes OpenAI-style completion requests and splits each into a prefill leg (max_tokens 1,
// the engine keeps or pushes the KV cache) and a decode leg, whose answer it streams back
// to the client unchanged.
//
// Pull (vLLM's NixlConnector): prefill first; its answer's kv_transfer_params go to the
// decode engine, chosen after prefill by least outstanding requests. Push (NixlPushConnector):
// the decode engine and a prefill engine are chosen first and both legs are dispatched at
// once; decode's kv_transfer_params name the prefill engine's side channel and a transfer id
// that both legs share.
//
// Engines are a static list (Config.Prefill, Config.Decode), or come and go through a
// registry (Config.Dynamic and Proxy.SetMembers; examples/discovery follows etcd): a prefill
// and a decode engine are paired only when their compatibility hashes agree, and an engine
// that restarts under its id is a new incarnation. Nor are two engines paired whose KV
// geometries, reported on GET /kv_transfer_info, differ (geometry.go): each such pair is
// logged once, and a request no other pair can serve is answered 502 naming both engines and
// the fields, before either leg is sent.
//
// A decode leg that failed before the decode engine took the request in (no connection, or
// a 503 before its answer) is retried once on another decode engine with the same KV; one
// that failed after is not (see failover.go). GET /metrics serves the proxy's Prometheus
// series (metrics.go). Config.StartWait lets the proxy start before its engines (wait.go).
//
// Config.Render adds the render tier (render.go, render_chat.go): chat completions go render,
// P/D on token ids, derender.
//
// The package uses the standard library, zap, the Prometheus client, and for the render tier
// the render client (examples/render), so it can be copied out of the repository as a
// starting point with those.
package pd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonixl/gonixl/examples/render/chat"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Connectors and policies Config accepts.
const (
	ConnectorPull = "pull"
	ConnectorPush = "push"

	PolicyRoundRobin       = "round_robin"
	PolicyLeastOutstanding = "least_outstanding"
)

// DefaultHealthFailures is Config.HealthFailures' default: an engine leaves rotation
// after 3 failed health checks in a row (6 s at the default interval), as a load
// balancer's unhealthy threshold does.
const DefaultHealthFailures = 3

// Config configures a Proxy.
type Config struct {
	// Prefill and Decode are engine base URLs ("http://127.0.0.1:8100"); a bare host:port
	// gets "http://". At least one of each.
	Prefill, Decode []string
	// Connector is "pull" or "push"; "" asks the engines (GET /kv_transfer_info) at New and
	// requires that all that answer agree. Engines that report another connector are kept
	// out of rotation.
	Connector string
	// Policy picks among engines of one role: "round_robin" (default) or
	// "least_outstanding". With pull, the decode engine is always the one with the least
	// outstanding requests (it is chosen after prefill).
	Policy string
	// Client sends every upstream request; default: a client with dial timeouts and
	// keep-alives that it drops after IdleConnTimeout idle (below the engines' own), no
	// overall timeout (streams), no transparent compression.
	Client *http.Client
	// RequestTimeout bounds each leg (the decode leg including its stream); default 120 s.
	RequestTimeout time.Duration
	// Dynamic lets SetMembers add and remove engines while the proxy runs (a registry such
	// as etcd, see examples/discovery); Prefill and Decode may then be empty, and Connector
	// is required when they are.
	Dynamic bool
	// HealthInterval is the period of GET /health (and /kv_transfer_info) on every engine;
	// default 2 s.
	HealthInterval time.Duration
	// HealthFailures is how many health checks in a row an engine in rotation must fail
	// to leave it (default DefaultHealthFailures): one slow answer on a busy host does not
	// empty a pool. One check that passes brings it back. An engine that has not passed a
	// check yet is out of rotation until it does.
	HealthFailures int
	// HealthTimeout bounds each round of health checks (default HealthInterval, at least
	// 1 s and at most 5 s); a check that takes longer failed.
	HealthTimeout time.Duration
	// StartWait bounds how long New waits for the static engines: until a prefill and a
	// decode engine that may be paired are in rotation (and, with Connector "", one of them
	// reported the connector), logging what it still waits for. When it passes, New fails
	// with what the engines answered last. 0: no wait (engines that do not answer start out
	// of rotation; with Connector "" New fails at once). Engines that only come through
	// SetMembers are not waited for.
	StartWait time.Duration
	// Logger; default: none.
	Logger *zap.Logger
	// TracerProvider records one trace per completion (trace.go,
	// docs/metrics.md), whose context goes to the engines in W3C
	// traceparent. Default: otel's global provider, which records nothing
	// unless the program installed one.
	TracerProvider trace.TracerProvider
	// Bidirectional (pull) turns on bidirectional KV for multi-turn chats
	// (conversation.go): a conversation's next turn goes to the engines
	// that hold its history, and prefill reads it back from decode. The
	// engines must run with it too (server.Config.Bidirectional).
	Bidirectional bool
	// ConversationTTL is how long a turn's history is remembered (default
	// DefaultConversationTTL, the decode engine's default hold).
	ConversationTTL time.Duration
	// Render, when set, are render servers' base URLs (examples/render/server):
	// chat completions then travel three hops (render_chat.go): render to
	// token ids, the P/D legs on the engines' POST /inference/v1/generate
	// (the engines run tokens-only), derender. Render servers are health
	// checked as engines are; round robin among those in rotation.
	Render []string
	// RenderPipeline, with Render, derenders streams in the proxy, each
	// chunk's work in proportion to its own tokens; it must be configured
	// as the render servers' pipeline is. Nil: each chunk is a call to a
	// render server's stateless streaming derender (vLLM's, which replays
	// the history).
	RenderPipeline *chat.Pipeline
}

// Stats are the proxy's counters since New.
type Stats struct {
	Requests        uint64 // completion requests received
	Retried         uint64 // requests retried, on another prefill or decode engine (at most once each)
	DecodeFailovers uint64 // of Retried: decode legs retried on another decode engine, no KV read
	Failed          uint64 // requests answered with an error or whose stream broke off
	ClientCancelled uint64 // requests whose client went away before the end
}

// Proxy is an http.Handler splitting completion requests over prefill and decode engines.
type Proxy struct {
	cfg       Config
	connector string // "pull" or "push"
	client    *http.Client
	ownClient bool
	log       *zap.Logger

	static    pools // from Config.Prefill and Config.Decode
	cur       atomic.Pointer[pools]
	membersMu sync.Mutex // serializes SetMembers
	rrPrefill atomic.Uint64
	rrDecode  atomic.Uint64

	requests, retried, failed, cancelled atomic.Uint64
	decodeFailovers                      atomic.Uint64
	met                                  *metrics
	convs                                conversations // Config.Bidirectional
	render                               *renderTier   // Config.Render; nil without
	geoLog                               geometryLogged

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New checks cfg, checks every engine once (and learns the connector if cfg.Connector is
// ""), and starts the health checks. Engines that do not answer yet start out of rotation;
// with cfg.StartWait, New first waits for them.
func New(cfg Config) (*Proxy, error) { return NewContext(context.Background(), cfg) }

// NewContext is New; ctx ending cuts the wait of cfg.StartWait short.
func NewContext(ctx context.Context, cfg Config) (*Proxy, error) {
	if !cfg.Dynamic && (len(cfg.Prefill) == 0 || len(cfg.Decode) == 0) {
		return nil, errors.New("pd: at least one prefill and one decode engine are needed (or Config.Dynamic)")
	}
	if cfg.Dynamic && cfg.Connector == "" && (len(cfg.Prefill) == 0 || len(cfg.Decode) == 0) {
		return nil, errors.New("pd: Config.Dynamic without static engines needs Config.Connector")
	}
	switch cfg.Connector {
	case "", ConnectorPull, ConnectorPush:
	default:
		return nil, fmt.Errorf("pd: connector %q: want %q, %q or \"\" (ask the engines)", cfg.Connector, ConnectorPull, ConnectorPush)
	}
	switch cfg.Policy {
	case "":
		cfg.Policy = PolicyRoundRobin
	case PolicyRoundRobin, PolicyLeastOutstanding:
	default:
		return nil, fmt.Errorf("pd: policy %q: want %q or %q", cfg.Policy, PolicyRoundRobin, PolicyLeastOutstanding)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 120 * time.Second
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = 2 * time.Second
	}
	if cfg.HealthFailures <= 0 {
		cfg.HealthFailures = DefaultHealthFailures
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = min(max(cfg.HealthInterval, time.Second), 5*time.Second)
	}
	p := &Proxy{cfg: cfg, connector: cfg.Connector, client: cfg.Client, log: cfg.Logger}
	p.convs.ttl = cfg.ConversationTTL
	if p.log == nil {
		p.log = zap.NewNop()
	}
	if p.client == nil {
		p.client = defaultClient()
		p.ownClient = true
	}
	seen := map[string]bool{}
	for _, r := range []struct {
		urls []string
		role role
		dst  *[]*engine
	}{{cfg.Prefill, rolePrefill, &p.static.prefill}, {cfg.Decode, roleDecode, &p.static.decode}} {
		for _, u := range r.urls {
			u, err := normalizeURL(u)
			if err != nil {
				return nil, err
			}
			key := r.role.String() + " " + u
			if seen[key] {
				return nil, fmt.Errorf("pd: %s engine %s listed twice", r.role, u)
			}
			seen[key] = true
			e := &engine{url: u, role: r.role}
			*r.dst = append(*r.dst, e)
			p.static.all = append(p.static.all, e)
		}
	}
	p.cur.Store(&p.static)
	if len(cfg.Render) > 0 {
		if cfg.Bidirectional {
			return nil, errors.New("pd: Config.Render with Config.Bidirectional: the render tier does not carry bidirectional KV yet")
		}
		rt, err := newRenderTier(cfg.Render, p.client, cfg.RenderPipeline)
		if err != nil {
			p.closeClient()
			return nil, err
		}
		p.render = rt
	}
	p.met = newMetrics(p)

	p.checkAll(context.Background(), p.connector)
	if err := p.waitEngines(ctx); err != nil {
		p.closeClient()
		return nil, err
	}
	if p.connector == "" {
		conn, err := p.discoverConnector()
		if err != nil {
			p.closeClient()
			return nil, err
		}
		p.connector = conn
	}
	p.log.Info("proxy ready", zap.String("connector", p.connector), zap.String("policy", cfg.Policy),
		zap.Int("prefill_in_rotation", p.inRotationCount(p.pools().prefill)),
		zap.Int("decode_in_rotation", p.inRotationCount(p.pools().decode)))

	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	p.wg.Go(func() { p.healthLoop(ctx) })
	return p, nil
}

// discoverConnector settles the connector from the engines' /kv_transfer_info answers;
// engines that disagree are an error (a pull engine paired with a push engine fails).
func (p *Proxy) discoverConnector() (string, error) {
	found := map[string][]string{}
	for _, e := range p.pools().all {
		if info := e.kvInfo(); info != nil {
			if c := normalizeConnector(info.Connector); c != "" {
				found[c] = append(found[c], e.url)
			}
		}
	}
	switch len(found) {
	case 0:
		return "", errors.New("pd: no connector given and no engine reported one on GET /kv_transfer_info; start the engines first or set the connector")
	case 1:
		for c := range found {
			if c != ConnectorPull && c != ConnectorPush {
				return "", fmt.Errorf("pd: engines report connector %q, which this proxy does not speak", c)
			}
			return c, nil
		}
	}
	var parts []string
	for c, urls := range found {
		parts = append(parts, fmt.Sprintf("%s: %s", c, strings.Join(urls, " ")))
	}
	return "", fmt.Errorf("pd: engines disagree on the connector (%s); a pull engine paired with a push engine cannot work", strings.Join(parts, "; "))
}

func normalizeURL(u string) (string, error) {
	u = strings.TrimRight(strings.TrimSpace(u), "/")
	if u == "" {
		return "", errors.New("pd: empty engine address")
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return "", fmt.Errorf("pd: engine address %q: want http:// or https://", u)
	}
	return u, nil
}

// IdleConnTimeout is how long the default client keeps an idle connection to an engine
// or a render server. It must be shorter than the server's own keep-alive: a server that
// closes an idle connection just as the proxy sends a request on it makes that request
// fail with EOF, and a POST that failed so is not sent again (net/http resends only
// idempotent requests, and the proxy cannot tell it from an engine that died after it
// took the request in; see failover.go). vLLM's HTTP servers close connections idle for
// VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5 s (vllm/envs.py@0.34.0, passed as uvicorn's
// timeout_keep_alive in vllm/entrypoints/launchers/api_server/entry.py@0.34.0 and
// launchers/render/entry.py@0.34.0), so the proxy lets go of its side a second earlier.
// An engine set up with a shorter keep-alive needs a Client with a shorter one still.
const IdleConnTimeout = 4 * time.Second

func defaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       IdleConnTimeout,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // pass the engines' bytes through as they are
	}}
}

// Connector is the connector the proxy speaks ("pull" or "push").
func (p *Proxy) Connector() string { return p.connector }

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Requests:        p.requests.Load(),
		Retried:         p.retried.Load(),
		DecodeFailovers: p.decodeFailovers.Load(),
		Failed:          p.failed.Load(),
		ClientCancelled: p.cancelled.Load(),
	}
}

// Close stops the health checks (requests in flight go on). It is safe to call twice.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.stop()
		p.wg.Wait()
		p.closeClient()
	})
	return nil
}

func (p *Proxy) closeClient() {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
}

// ServeHTTP routes POST /v1/completions, GET /healthcheck, GET /v1/models and GET /metrics,
// and counts every request by route and status.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	defer p.met.count(r, sw)
	w = sw
	if r.URL.Path == "/metrics" { // before the route table, which stays the API's
		p.met.handler.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/v1/completions" || r.URL.Path == chatPath {
		var span trace.Span
		r, span = p.startTrace(r)
		defer span.End()
	}
	switch r.URL.Path {
	case "/v1/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST for /v1/completions")
			return
		}
		p.checkedCompletions(w, r)
	case chatPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST for "+chatPath)
			return
		}
		p.serveChat(w, r)
	case "/healthcheck":
		p.serveHealthcheck(w, r)
	case "/v1/models":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "use GET for /v1/models")
			return
		}
		p.serveModels(w, r)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("No route %s %s on the P/D proxy; it serves POST /v1/completions, POST %s, GET /v1/models, GET /healthcheck and GET /metrics.", r.Method, r.URL.Path, chatPath))
	}
}

func (p *Proxy) serveHealthcheck(w http.ResponseWriter, _ *http.Request) {
	pools := p.pools()
	np, nd := p.inRotationCount(pools.prefill), p.inRotationCount(pools.decode)
	paired := false // some prefill engine in rotation may be paired with a decode one
	for _, e := range pools.prefill {
		if e.inRotation(p.connector) && p.hasPartner(pools.decode, e) {
			paired = true
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if p.render != nil && p.render.inRotation() == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":"unavailable","prefill_in_rotation":%d,"decode_in_rotation":%d,"compatible_pair":%v,"render_in_rotation":0}`, np, nd, paired)
		return
	}
	if !paired {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":"unavailable","prefill_in_rotation":%d,"decode_in_rotation":%d,"compatible_pair":false}`, np, nd)
		return
	}
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}
