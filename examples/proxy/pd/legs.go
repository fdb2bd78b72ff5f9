package pd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

const (
	maxRequestBody = 64 << 20 // a long prompt as token ids is a few MiB
	maxPrefillBody = 16 << 20
	maxErrorBody   = 1 << 20
)

// completion is one client request being proxied.
type completion struct {
	r      *http.Request
	id     string                     // X-Request-Id of both legs
	fields map[string]json.RawMessage // the client's JSON, values byte for byte
	stream bool
	log    *zap.Logger
	start  time.Time // when the proxy got it: TTFT counts from here
	legs   *legClock // when its legs were in flight (overhead.go); shared by with's copies
	// observe, when set, sees decode's answer as it is relayed
	// (conversation.go).
	observe func([]byte)
	// tokens: the legs are generate requests (render tier, render_chat.go);
	// derender then answers the client from decode's answer.
	tokens   bool
	derender *derenderHop
}

// body returns the client's request with kv_transfer_params set to kv (a
// generate request's too: at its top level) and, for a prefill leg, one
// token (max_tokens 1; a generate request's sampling_params.max_tokens),
// stream false and no stream_options.
func (c *completion) body(kv any, prefill bool) []byte {
	m := make(map[string]json.RawMessage, len(c.fields)+4)
	for k, v := range c.fields {
		m[k] = v
	}
	if prefill {
		if c.tokens {
			prefillTokens(m)
		} else {
			m["max_tokens"] = json.RawMessage("1")
			if _, ok := m["max_completion_tokens"]; ok {
				m["max_completion_tokens"] = json.RawMessage("1")
			}
		}
		m["stream"] = json.RawMessage("false")
		delete(m, "stream_options")
	}
	raw, err := json.Marshal(kv)
	if err != nil {
		panic(err) // kv is built by this package from marshalable values
	}
	m["kv_transfer_params"] = raw
	out, err := json.Marshal(m)
	if err != nil {
		panic(err) // values came out of json.Unmarshal
	}
	return out
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID version 4, as vLLM's proxy (uuid.uuid4())
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func newTransferID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// legError is why a leg gave no usable answer.
type legError struct {
	status    int    // status for the client
	msg       string // message for the client (when body is nil)
	body      []byte // engine's 4xx body passed through as it is
	ctype     string // its Content-Type
	retryable bool   // 5xx or connection error: another engine may do
	cancelled bool   // the client went away
	failover  string // decode did not take the request in (a retry reason): another decode engine may do
}

func (e *legError) Error() string { return e.msg }

// send posts body to e's /v1/completions with the leg headers.
func (p *Proxy) send(ctx context.Context, c *completion, e *engine, path string, body []byte) (*http.Response, error) {
	return p.sendWith(ctx, c, e, path, body, nil)
}

// sendWith is send with extra request headers.
func (p *Proxy) sendWith(ctx context.Context, c *completion, e *engine, path string, body []byte, extra http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", c.id)
	if a := c.r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	req, span := p.legSpan(req, e)
	leg := c.legs.begin(time.Now())
	resp, err := p.client.Do(req)
	endLeg(span, resp, err, func() { c.legs.end(leg, time.Now()) })
	return resp, err
}

// transportError classifies an error of client.Do or of reading a body.
func (p *Proxy) transportError(c *completion, legCtx context.Context, e *engine, err error) *legError {
	switch {
	case c.r.Context().Err() != nil:
		return &legError{status: 499, msg: "client went away", cancelled: true}
	case errors.Is(legCtx.Err(), context.DeadlineExceeded):
		return &legError{status: http.StatusGatewayTimeout, msg: fmt.Sprintf("%s engine %s did not answer within %s", e.role, e.url, p.cfg.RequestTimeout)}
	case legCtx.Err() != nil:
		msg := fmt.Sprintf("%s leg to %s cancelled", e.role, e.url)
		if cause := context.Cause(legCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			msg += ": " + cause.Error()
		}
		return &legError{status: http.StatusBadGateway, msg: msg}
	}
	e.markDown()
	return &legError{status: http.StatusBadGateway, retryable: true,
		msg: fmt.Sprintf("%s engine %s could not be reached: %v", e.role, e.url, err)}
}

// statusError classifies a non-2xx answer; it reads and closes resp.Body.
func statusError(e *engine, resp *http.Response) *legError {
	return statusErrorOf(fmt.Sprintf("%s engine %s", e.role, e.url), resp)
}

// decodeStatusError is statusError for decode engine de's answer to a leg with KV from
// prefill engine pe, and names both: an engine answers 5xx for a pair that cannot work
// (engines deployed with different KV geometry), which the operator fixes.
func decodeStatusError(de, pe *engine, resp *http.Response) *legError {
	return statusErrorOf(fmt.Sprintf("decode engine %s (KV from prefill engine %s)", de.url, pe.url), resp)
}

func statusErrorOf(who string, resp *http.Response) *legError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := fmt.Sprintf("%s answered %d: %s", who, resp.StatusCode, engineMessage(body))
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return &legError{status: resp.StatusCode, body: body, ctype: resp.Header.Get("Content-Type"), msg: msg}
	}
	return &legError{status: http.StatusBadGateway, retryable: resp.StatusCode >= 500, msg: msg}
}

// engineMessage extracts the message of an OpenAI-style error body.
func engineMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return s
		}
		if v.Message != "" {
			return v.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// prefillLeg runs a whole prefill leg and returns the answer's body.
func (p *Proxy) prefillLeg(ctx context.Context, c *completion, e *engine, path string, body []byte) (out []byte, le *legError) {
	start := time.Now()
	defer func() { p.met.leg("prefill", start, le == nil) }()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.send(ctx, c, e, path, body)
	if err != nil {
		return nil, p.transportError(c, ctx, e, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError(e, resp)
	}
	defer resp.Body.Close()
	out, err = io.ReadAll(io.LimitReader(resp.Body, maxPrefillBody))
	if err != nil {
		return nil, p.transportError(c, ctx, e, err)
	}
	if !json.Valid(out) {
		// An engine shutting down may end the request with an empty 200; another engine
		// may do.
		e.markDown()
		return nil, &legError{status: http.StatusBadGateway, retryable: true,
			msg: fmt.Sprintf("%s engine %s answered %d without a JSON body (%d bytes)", e.role, e.url, resp.StatusCode, len(out))}
	}
	return out, nil
}

// serveCompletions serves a /v1/completions request that arrived at start
// (TTFT counts from there).
func (p *Proxy) serveCompletions(w http.ResponseWriter, r *http.Request, start time.Time) {
	p.requests.Add(1)
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		if r.Context().Err() != nil {
			p.cancelled.Add(1)
			return
		}
		p.failed.Add(1)
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		writeError(w, status, "reading the request body: "+err.Error())
		return
	}
	c := &completion{r: r, id: r.Header.Get("X-Request-Id"), start: start, legs: &legClock{}}
	if err := json.Unmarshal(raw, &c.fields); err != nil || c.fields == nil {
		p.failed.Add(1)
		msg := "the request body is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if s, ok := c.fields["stream"]; ok {
		_ = json.Unmarshal(s, &c.stream)
	}
	if c.id == "" {
		c.id = newRequestID()
	}
	c.log = p.log.With(zap.String("request_id", c.id))
	if p.connector == ConnectorPush {
		p.servePush(w, c, "/v1/completions")
	} else {
		p.servePull(w, c, completionsRoute(c))
	}
}

// fail answers the client with le (nothing if the client went away) and counts it.
func (p *Proxy) fail(w http.ResponseWriter, c *completion, le *legError) {
	if le.cancelled {
		p.cancelled.Add(1)
		c.log.Debug("client went away")
		return
	}
	p.failed.Add(1)
	c.traceFailed(le)
	c.log.Warn("request failed", zap.Int("status", le.status), zap.String("error", le.msg))
	if le.body != nil {
		if le.ctype != "" {
			w.Header().Set("Content-Type", le.ctype)
		}
		w.Header().Set("X-Request-Id", c.id)
		w.WriteHeader(le.status)
		_, _ = w.Write(le.body)
		return
	}
	w.Header().Set("X-Request-Id", c.id)
	writeError(w, le.status, le.msg)
}

var errNoEngine = func(r role) *legError {
	return &legError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("no %s engine in rotation", r)}
}

// servePull runs the prefill leg, then the decode leg on the decode engine with the least
// outstanding requests among those compatible with the prefill engine. One retry is
// allowed per request: on another prefill engine when the prefill leg fails with a 5xx or
// a connection error, or when decode answers a 5xx other than 503 before streaming (its KV
// load from that prefill engine failed: the engine died, or lost the blocks); on another
// decode engine, with the same KV, when decode did not take the request in (no
// connection, or a 503: see failover.go).
func (p *Proxy) servePull(w http.ResponseWriter, c *completion, route pullRoute) {

	var triedP, triedD []*engine
	var last *legError
	retries := 0
	var announce func() // counts and logs the retry once it has an engine to go to
	retry := func(le *legError, reason, what string, fields ...zap.Field) bool {
		last = le
		if !le.retryable || retries > 0 {
			return false
		}
		retries++
		announce = func() {
			p.countRetry(reason)
			c.log.Info(what, append(fields, zap.String("reason", reason), zap.String("error", le.msg))...)
			announce = nil
		}
		return true
	}
	for {
		pools := p.pools()
		// A prefill engine no decode engine can pair with would prefill for nothing.
		pe, releaseP := p.pickPreferred(route.history.prefillURL(), pools.prefill, &p.rrPrefill, p.cfg.Policy, func(e *engine) bool {
			return p.hasPartner(pools.decode, e)
		}, triedP...)
		if pe == nil {
			if last == nil {
				last = p.noPair(pools.prefill, pools.decode, rolePrefill)
			}
			p.fail(w, c, last)
			return
		}
		if announce != nil {
			announce()
		}
		answer, le := p.prefillLeg(c.r.Context(), c, pe, route.path, route.prefill)
		releaseP()
		if le != nil {
			triedP = append(triedP, pe)
			if retry(le, reasonPrefillFailed, "prefill failed, retrying on another engine", zap.String("engine", pe.url)) {
				continue
			}
			p.fail(w, c, le)
			return
		}
		last = nil
		decodeBody, le := route.decode(answer)
		if le != nil {
			p.fail(w, c, le)
			return
		}
		for {
			// The decode engine is chosen now, with the load it has after prefill.
			accept := func(e *engine) bool { return compatible(pe, e) }
			de, releaseD := p.pickPreferred(route.history.decodeURL(), p.pools().decode, &p.rrDecode, PolicyLeastOutstanding, accept, triedD...)
			if de == nil && len(triedD) > 0 {
				de, releaseD = p.pick(p.pools().decode, &p.rrDecode, PolicyLeastOutstanding, accept)
			}
			if de == nil {
				if last == nil {
					last = errNoEngine(roleDecode)
				}
				p.fail(w, c, last)
				return
			}
			if announce != nil {
				announce()
			}
			ctx, cancel := context.WithTimeout(c.r.Context(), p.cfg.RequestTimeout)
			sent := time.Now()
			resp, takenIn, err := p.sendDecode(ctx, c, de, route.path, decodeBody)
			if err != nil {
				le := p.transportError(c, ctx, de, err)
				releaseD()
				cancel()
				p.met.leg("decode", sent, false)
				triedD = append(triedD, de)
				// Only a request that decode never took in may go to another one: one it took
				// in may have read (and released) the prefill engine's blocks (failover.go).
				if isDialError(err) && retry(le, reasonDecodeUnreachable, "decode unreachable, retrying on another decode engine", zap.String("engine", de.url)) {
					continue
				}
				if c.r.Context().Err() == nil && closedBeforeTakenIn(de, takenIn, err) &&
					retry(le, reasonDecodeClosed, "decode connection closed before it took the request in, retrying on another decode engine", zap.String("engine", de.url)) {
					continue
				}
				p.fail(w, c, le)
				return
			}
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				refused := decodeRefused(resp.StatusCode)
				le := decodeStatusError(de, pe, resp)
				releaseD()
				cancel()
				p.met.leg("decode", sent, false)
				triedD = append(triedD, de)
				if refused {
					// Decode did not take the request in: prefill's hold is untouched, the same
					// KV goes to another decode engine.
					if retry(le, reasonDecodeRefused, "decode refused the request before reading KV, retrying on another decode engine", zap.String("engine", de.url)) {
						continue
					}
					p.fail(w, c, le)
					return
				}
				triedP = append(triedP, pe)
				if retry(le, reasonDecodeKVFailed, "decode failed before answering, retrying on another prefill engine",
					zap.String("prefill", pe.url), zap.String("decode", de.url)) {
					break // to a new prefill leg
				}
				p.fail(w, c, le)
				return
			}
			route.history.watch(c, pe.url, de.url)
			ok := p.relay(w, c, ctx, de, resp)
			p.met.leg("decode", sent, ok)
			releaseD()
			cancel()
			return
		}
	}
}

// pullRoute is what differs between the routes servePull serves: the path
// both legs post to, the prefill leg's request, and how decode's request
// is made from prefill's answer (or why it cannot be).
type pullRoute struct {
	path    string
	prefill []byte
	decode  func(answer []byte) ([]byte, *legError)
	// history is the chat turn's bidirectional KV (conversation.go), or nil.
	history *historyRoute
}

// prefillKeys make a client's request the prefill leg's: prefill for a
// remote decode, no remote blocks of its own.
var prefillKeys = map[string]any{
	"do_remote_decode":  true,
	"do_remote_prefill": false,
	"remote_engine_id":  nil,
	"remote_block_ids":  nil,
	"remote_host":       nil,
	"remote_port":       nil,
}

// completionsRoute is /v1/completions on pull: decode gets the client's
// request with prefill's kv_transfer_params.
func completionsRoute(c *completion) pullRoute {
	return pullRoute{path: "/v1/completions", prefill: c.body(prefillKeys, true), decode: func(answer []byte) ([]byte, *legError) {
		kv, le := kvParams(answer)
		if le != nil {
			return nil, le
		}
		return c.body(kv, false), nil
	}}
}

// kvParams returns the kv_transfer_params of a prefill answer.
func kvParams(answer []byte) (json.RawMessage, *legError) {
	var pa struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(answer, &pa); err != nil || len(pa.KV) == 0 || string(pa.KV) == "null" {
		return nil, &legError{status: http.StatusBadGateway,
			msg: "the prefill engine's answer carries no kv_transfer_params (is it a kv_producer with the NIXL connector?)"}
	}
	return pa.KV, nil
}

// noPair is the error when no engine of want's role (pool mine) can be paired with one of
// others: none is in rotation, or none of the others is.
func (p *Proxy) noPair(mine, others []*engine, want role) *legError {
	if p.inRotationCount(others) == 0 {
		return errNoEngine(otherRole(want))
	}
	if p.inRotationCount(mine) == 0 {
		return errNoEngine(want)
	}
	prefill, decode := mine, others
	if want == roleDecode {
		prefill, decode = others, mine
	}
	if le := p.geometryError(prefill, decode); le != nil {
		return le
	}
	return &legError{status: http.StatusServiceUnavailable,
		msg: fmt.Sprintf("no %s engine in rotation is compatible (connector, compatibility hash) with a %s engine in rotation", want, otherRole(want))}
}

// hasPartner says whether pool has an engine pick may reach (in rotation, or
// at pick's fallback levels) that may be paired with e.
func (p *Proxy) hasPartner(pool []*engine, e *engine) bool {
	for _, d := range pool {
		if compatible(e, d) && d.usable(p.connector, slowOK) {
			return true
		}
	}
	return false
}

// isDialError says whether err is a failure to connect: the request was not sent.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// relay answers the client from decode's answer. A non-streamed answer is read in full
// first, so that a decode engine dying mid-answer gives the client a JSON error instead
// of a cut body. A stream is passed through chunk by chunk with a flush after each; once
// its status is written, a stream that breaks off ends with an SSE error event and
// [DONE], as an engine ends a stream that fails. It says whether decode's whole answer
// reached the client.
func (p *Proxy) relay(w http.ResponseWriter, c *completion, ctx context.Context, de *engine, resp *http.Response) bool {
	if c.derender != nil {
		return p.relayDerender(w, c, ctx, de, resp)
	}
	defer resp.Body.Close()
	h := w.Header()
	for _, k := range []string{"Content-Type", "Cache-Control", "X-Request-Id"} {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	if h.Get("X-Request-Id") == "" {
		h.Set("X-Request-Id", c.id)
	}
	if !c.stream {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
		if err != nil {
			for _, k := range []string{"Content-Type", "Cache-Control"} {
				h.Del(k)
			}
			le := p.transportError(c, ctx, de, err)
			le.msg = "decode answer broke off: " + le.msg
			p.fail(w, c, le)
			return false
		}
		if !json.Valid(body) {
			// An engine shutting down may end the request with an empty 200.
			for _, k := range []string{"Content-Type", "Cache-Control"} {
				h.Del(k)
			}
			de.markDown()
			p.fail(w, c, &legError{status: http.StatusBadGateway,
				msg: fmt.Sprintf("decode engine %s answered %d without a JSON body (%d bytes)", de.url, resp.StatusCode, len(body))})
			return false
		}
		if c.observe != nil {
			c.observe(body)
		}
		h.Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(resp.StatusCode)
		p.met.firstToken(c)
		if _, err := w.Write(body); err != nil {
			p.cancelled.Add(1)
			c.log.Debug("client went away", zap.Error(err))
			return false
		}
		return true
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	var tail []byte // the stream's last bytes: a whole stream ends with "data: [DONE]"
	first := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if first {
				first = false
				p.met.firstToken(c)
			}
			if c.observe != nil {
				c.observe(buf[:n])
			}
			tail = append(tail, buf[:n]...)
			if len(tail) > 64 {
				tail = append(tail[:0], tail[len(tail)-64:]...)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				p.cancelled.Add(1)
				c.log.Debug("client went away mid-stream", zap.Error(werr))
				return false
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				p.cancelled.Add(1)
				c.log.Debug("client went away mid-stream", zap.Error(ferr))
				return false
			}
		}
		if err == io.EOF && bytes.HasSuffix(bytes.TrimRight(tail, "\r\n"), []byte("data: [DONE]")) {
			return true
		}
		if err != nil {
			var le *legError
			if err == io.EOF {
				// An engine shutting down may end a stream early without an error event.
				de.markDown()
				le = &legError{status: http.StatusBadGateway, msg: fmt.Sprintf("decode engine %s ended the stream without [DONE]", de.url)}
			} else if le = p.transportError(c, ctx, de, err); le.cancelled {
				p.cancelled.Add(1)
				return false
			}
			p.failed.Add(1)
			c.log.Warn("decode stream broke off", zap.String("engine", de.url), zap.String("error", le.msg))
			ev := bytes.TrimSuffix(errorJSON(le.status, "", "decode stream broke off: "+le.msg), []byte("\n"))
			// A partial SSE line is ended first so that the event parses.
			_, _ = fmt.Fprintf(w, "\n\ndata: %s\n\ndata: [DONE]\n\n", ev)
			_ = rc.Flush()
			return false
		}
	}
}

// countRetry counts a retry the proxy is about to make, for Stats and /metrics.
func (p *Proxy) countRetry(reason string) {
	p.retried.Add(1)
	if reason == reasonDecodeUnreachable || reason == reasonDecodeRefused || reason == reasonDecodeClosed {
		p.decodeFailovers.Add(1)
	}
	p.met.retries.WithLabelValues(reason).Inc()
}
