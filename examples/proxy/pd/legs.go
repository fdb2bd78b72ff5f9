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
	"net/http"
	"strings"

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
}

// body returns the client's request with kv_transfer_params set to kv and, for a prefill
// leg, max_tokens 1, stream false and no stream_options.
func (c *completion) body(kv any, prefill bool) []byte {
	m := make(map[string]json.RawMessage, len(c.fields)+4)
	for k, v := range c.fields {
		m[k] = v
	}
	if prefill {
		m["max_tokens"] = json.RawMessage("1")
		if _, ok := m["max_completion_tokens"]; ok {
			m["max_completion_tokens"] = json.RawMessage("1")
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
}

func (e *legError) Error() string { return e.msg }

// send posts body to e's /v1/completions with the leg headers.
func (p *Proxy) send(ctx context.Context, c *completion, e *engine, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", c.id)
	if a := c.r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	return p.client.Do(req)
}

// transportError classifies an error of client.Do or of reading a body.
func (p *Proxy) transportError(c *completion, legCtx context.Context, e *engine, err error) *legError {
	switch {
	case c.r.Context().Err() != nil:
		return &legError{status: 499, msg: "client went away", cancelled: true}
	case errors.Is(legCtx.Err(), context.DeadlineExceeded):
		return &legError{status: http.StatusGatewayTimeout, msg: fmt.Sprintf("%s engine %s did not answer within %s", e.role, e.url, p.cfg.RequestTimeout)}
	case legCtx.Err() != nil:
		return &legError{status: http.StatusBadGateway, msg: fmt.Sprintf("%s leg to %s cancelled", e.role, e.url)}
	}
	e.markDown()
	return &legError{status: http.StatusBadGateway, retryable: true,
		msg: fmt.Sprintf("%s engine %s could not be reached: %v", e.role, e.url, err)}
}

// statusError classifies a non-2xx answer; it reads and closes resp.Body.
func statusError(e *engine, resp *http.Response) *legError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return &legError{status: resp.StatusCode, body: body, ctype: resp.Header.Get("Content-Type"),
			msg: fmt.Sprintf("%s engine %s answered %d: %s", e.role, e.url, resp.StatusCode, engineMessage(body))}
	}
	return &legError{status: http.StatusBadGateway, retryable: resp.StatusCode >= 500,
		msg: fmt.Sprintf("%s engine %s answered %d: %s", e.role, e.url, resp.StatusCode, engineMessage(body))}
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
func (p *Proxy) prefillLeg(ctx context.Context, c *completion, e *engine, body []byte) ([]byte, *legError) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.send(ctx, c, e, body)
	if err != nil {
		return nil, p.transportError(c, ctx, e, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError(e, resp)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillBody))
	if err != nil {
		return nil, p.transportError(c, ctx, e, err)
	}
	return out, nil
}

func (p *Proxy) serveCompletions(w http.ResponseWriter, r *http.Request) {
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
	c := &completion{r: r, id: r.Header.Get("X-Request-Id")}
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
		p.servePush(w, c)
	} else {
		p.servePull(w, c)
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

func (p *Proxy) servePull(w http.ResponseWriter, c *completion) {
	prefillBody := c.body(map[string]any{
		"do_remote_decode":  true,
		"do_remote_prefill": false,
		"remote_engine_id":  nil,
		"remote_block_ids":  nil,
		"remote_host":       nil,
		"remote_port":       nil,
	}, true)

	var answer []byte
	var tried []*engine
	var last *legError
	for attempt := 0; attempt < 2; attempt++ {
		pe, release := p.pick(p.prefill, &p.rrPrefill, p.cfg.Policy, tried...)
		if pe == nil {
			if last == nil {
				last = errNoEngine(rolePrefill)
			}
			break
		}
		if attempt > 0 {
			p.retried.Add(1)
			c.log.Info("prefill failed, retrying on another engine", zap.String("engine", pe.url), zap.String("error", last.msg))
		}
		var le *legError
		answer, le = p.prefillLeg(c.r.Context(), c, pe, prefillBody)
		release()
		if le == nil {
			last = nil
			break
		}
		last = le
		if !le.retryable {
			break
		}
		tried = append(tried, pe)
	}
	if last != nil {
		p.fail(w, c, last)
		return
	}

	var pa struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(answer, &pa); err != nil || len(pa.KV) == 0 || string(pa.KV) == "null" {
		p.fail(w, c, &legError{status: http.StatusBadGateway,
			msg: "the prefill engine's answer carries no kv_transfer_params (is it a kv_producer with the NIXL connector?)"})
		return
	}
	// The decode engine is chosen now, with the load it has after prefill.
	de, release := p.pick(p.decode, &p.rrDecode, PolicyLeastOutstanding)
	if de == nil {
		p.fail(w, c, errNoEngine(roleDecode))
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(c.r.Context(), p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.send(ctx, c, de, c.body(pa.KV, false))
	if err != nil {
		p.fail(w, c, p.transportError(c, ctx, de, err))
		return
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		p.fail(w, c, statusError(de, resp))
		return
	}
	p.relay(w, c, ctx, de, resp)
}

// relay streams decode's answer to the client: status, Content-Type, body chunk by chunk
// with a flush after each. Once the status is written nothing else can be said to the
// client: a broken stream is counted and logged here.
func (p *Proxy) relay(w http.ResponseWriter, c *completion, ctx context.Context, de *engine, resp *http.Response) {
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
	if !c.stream && resp.ContentLength >= 0 {
		h.Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				p.cancelled.Add(1)
				c.log.Debug("client went away mid-stream", zap.Error(werr))
				return
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				p.cancelled.Add(1)
				c.log.Debug("client went away mid-stream", zap.Error(ferr))
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			le := p.transportError(c, ctx, de, err)
			if le.cancelled {
				p.cancelled.Add(1)
			} else {
				p.failed.Add(1)
				c.log.Warn("decode stream broke off", zap.String("engine", de.url), zap.String("error", le.msg))
			}
			return
		}
	}
}
