package pd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonixl/gonixl/examples/render/chat"
	renderserver "github.com/gonixl/gonixl/examples/render/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The render tier (Config.Render; docs/serving.md, "The render tier"): a
// chat completion travels three hops, as vLLM 0.34.0's disaggregated
// serving sends it (vllm/entrypoints/scale_out/): POST
// /v1/chat/completions/render on a render server (the chat request in,
// token ids out), the P/D legs on the engines' POST /inference/v1/generate
// (token ids in and out; the engines run tokens-only), and POST
// /v1/chat/completions/derender on a render server with the original
// request passed back as chat_request. A streamed answer is derendered
// chunk by chunk; with Config.RenderPipeline each chunk costs work in
// proportion to its own tokens (chat.Stream), without it each chunk is one
// call to the render server's stateless streaming derender, which replays
// the history as vLLM's does.

// generatePath is the engines' token-in/token-out endpoint.
const generatePath = "/inference/v1/generate"

// Hop names: the legs label of gonixl_proxy_leg_duration_seconds and the
// spans proxy.render_hop and proxy.derender_hop.
const (
	hopRender   = "render"
	hopDerender = "derender"
)

// renderServer is one render server of Config.Render and what its health
// checks found.
type renderServer struct {
	url    string
	client *renderserver.Client

	mu           sync.Mutex
	healthy      bool  // a check passed since HealthFailures failed in a row
	failedChecks int   // checks failed in a row
	suspect      bool  // a request could not reach it since its last check
	lastErr      error // the last check's error
}

// whyOut says why rs is out of rotation, "" when it is in.
func (rs *renderServer) whyOut() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case !rs.healthy && rs.lastErr != nil:
		return rs.lastErr.Error()
	case !rs.healthy:
		return "no health check passed yet"
	case rs.suspect:
		return "a request could not reach it since its last health check"
	}
	return ""
}

func (rs *renderServer) markDown() {
	rs.mu.Lock()
	rs.suspect = true
	rs.mu.Unlock()
}

// usable: in rotation (suspect too when suspectOK).
func (rs *renderServer) usable(suspectOK bool) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.healthy && (suspectOK || !rs.suspect)
}

// renderTier is the proxy's render servers.
type renderTier struct {
	servers []*renderServer
	rr      atomic.Uint64
}

// newRenderTier makes the render servers of urls; their clients send
// through base with the hop's headers (hopTransport).
func newRenderTier(urls []string, base *http.Client, pipeline *chat.Pipeline) (*renderTier, error) {
	t := &renderTier{}
	seen := map[string]bool{}
	tr := base.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	hc := &http.Client{Transport: hopTransport{base: tr}}
	for _, u := range urls {
		u, err := normalizeURL(u)
		if err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("pd: render server %s listed twice", u)
		}
		seen[u] = true
		t.servers = append(t.servers, &renderServer{url: u, client: &renderserver.Client{BaseURL: u, HTTP: hc, Pipeline: pipeline}})
	}
	return t, nil
}

// pick returns a render server in rotation, round robin, other than those
// in exclude; a suspect one when no other is (as pick does for engines);
// nil when none is healthy.
func (t *renderTier) pick(exclude ...*renderServer) *renderServer {
	for _, suspectOK := range []bool{false, true} {
		n := len(t.servers)
		start := int(t.rr.Add(1))
		for i := range n {
			rs := t.servers[(start+i)%n]
			if rs.usable(suspectOK) && !containsServer(exclude, rs) {
				return rs
			}
		}
	}
	return nil
}

func containsServer(list []*renderServer, rs *renderServer) bool {
	for _, x := range list {
		if x == rs {
			return true
		}
	}
	return false
}

func (t *renderTier) inRotation() int {
	n := 0
	for _, rs := range t.servers {
		if rs.usable(false) {
			n++
		}
	}
	return n
}

// noRenderServer is the 503 when no render server is healthy, naming each
// and why.
func (t *renderTier) noRenderServer() *legError {
	var why []string
	for _, rs := range t.servers {
		if w := rs.whyOut(); w != "" {
			why = append(why, fmt.Sprintf("render server %s: %s", rs.url, w))
		}
	}
	return &legError{status: http.StatusServiceUnavailable, msg: "no render server in rotation (" + strings.Join(why, "; ") + ")"}
}

// checkRender runs one health check of rs: GET /health.
func (p *Proxy) checkRender(ctx context.Context, rs *renderServer) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rs.url+"/health", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = p.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET %s/health: status %d", rs.url, resp.StatusCode)
			}
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lastErr = err
	if err == nil {
		rs.healthy, rs.failedChecks, rs.suspect = true, 0, false
		return
	}
	rs.failedChecks++
	if rs.failedChecks >= p.cfg.HealthFailures || !rs.healthy {
		rs.healthy = false
	}
}

// hopKey carries a hop's request id and Authorization to hopTransport.
type hopKey struct{}

type hopHeaders struct{ requestID, auth string }

// hopTransport sets, on each request to a render server, the client
// request's X-Request-Id and Authorization and the hop span's W3C
// traceparent, from the request's context.
type hopTransport struct{ base http.RoundTripper }

func (t hopTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h, ok := r.Context().Value(hopKey{}).(hopHeaders); ok {
		r.Header.Set("X-Request-Id", h.requestID)
		if h.auth != "" {
			r.Header.Set("Authorization", h.auth)
		}
	}
	traceContext.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.base.RoundTrip(r)
}

// onRenderServer runs one hop, op(ctx, rs), on a render server (first, when
// not nil and in rotation, else one picked), with the leg's timeout, span
// and metric; a server that could not be reached, or answered 5xx, gives
// way once to another.
func (p *Proxy) onRenderServer(c *completion, hop string, first *renderServer, op func(ctx context.Context, rs *renderServer) error) (*renderServer, *legError) {
	var tried []*renderServer
	var last *legError
	for attempt := 0; attempt < 2; attempt++ {
		rs := first
		if rs == nil || attempt > 0 || !rs.usable(true) {
			rs = p.render.pick(tried...)
		}
		if rs == nil {
			if last != nil {
				return nil, last
			}
			return nil, p.render.noRenderServer()
		}
		if last != nil {
			p.countRetry(reasonRenderFailed)
			c.log.Info("render hop failed, retrying on another render server")
		}
		ctx, cancel := context.WithTimeout(c.r.Context(), p.cfg.RequestTimeout)
		ctx = context.WithValue(ctx, hopKey{}, hopHeaders{requestID: c.id, auth: c.r.Header.Get("Authorization")})
		ctx, span := p.tracer().Start(ctx, "proxy."+hop+"_hop", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("server.address", rs.url)))
		start := time.Now()
		leg := c.legs.begin(start) // the render tier's time, not the proxy's own
		err := op(ctx, rs)
		c.legs.end(leg, time.Now())
		var le *legError
		if err != nil {
			le = p.renderError(c, ctx, rs, hop, err)
			span.RecordError(err)
			span.SetStatus(codes.Error, le.msg)
		}
		span.End()
		p.met.leg(hop, start, err == nil)
		cancel()
		if le == nil {
			return rs, nil
		}
		tried, last = append(tried, rs), le
		if !le.retryable {
			return nil, le
		}
	}
	return nil, last
}

// renderError classifies a render hop's error: the render server's 4xx is
// the client's request at fault and goes back with its status and message;
// its 5xx, no connection, or no answer in time is a 502 or 504 naming the
// render server.
func (p *Proxy) renderError(c *completion, ctx context.Context, rs *renderServer, hop string, err error) *legError {
	var re *renderserver.Error
	switch {
	case c.r.Context().Err() != nil:
		return &legError{status: 499, msg: "client went away", cancelled: true}
	case errors.As(err, &re) && re.Status >= 400 && re.Status < 500:
		return &legError{status: re.Status, msg: re.Message}
	case errors.As(err, &re):
		return &legError{status: http.StatusBadGateway, retryable: true,
			msg: fmt.Sprintf("render server %s answered %d to the %s hop: %s", rs.url, re.Status, hop, re.Message)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &legError{status: http.StatusGatewayTimeout, msg: fmt.Sprintf("render server %s did not answer the %s hop within %s", rs.url, hop, p.cfg.RequestTimeout)}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		rs.markDown()
		return &legError{status: http.StatusBadGateway, retryable: true,
			msg: fmt.Sprintf("render server %s could not be reached for the %s hop: %v", rs.url, hop, ue.Err)}
	}
	return &legError{status: http.StatusBadGateway, msg: fmt.Sprintf("render server %s: %s hop failed: %v", rs.url, hop, err)}
}
