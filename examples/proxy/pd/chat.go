package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.uber.org/zap"
)

const chatPath = "/v1/chat/completions"

// serveChat proxies POST /v1/chat/completions with the pull connector and a
// token-id hand-off: the prefill leg asks for return_token_ids, and the decode
// leg gets prefill's prompt_token_ids with its kv_transfer_params, so decode
// serves exactly the tokens whose KV it loads instead of rendering the chat
// template again. Push would need the tokens before prefill has answered (both
// legs start at once), so a push proxy refuses chat with a 501.
func (p *Proxy) serveChat(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	c, status, param, msg := p.readRequest(w, r)
	if c == nil {
		if status == 0 {
			p.cancelled.Add(1)
			return
		}
		p.failed.Add(1)
		writeParamError(w, status, param, msg)
		return
	}
	if p.connector == ConnectorPush {
		p.failed.Add(1)
		writeError(w, http.StatusNotImplemented, "Chat completions through this proxy need the pull connector (decode is given the prompt's token ids from prefill's answer, and push starts both legs at once); use pull engines, or send /v1/completions with the chat template's prompt.")
		return
	}
	p.pullChat(w, c)
}

// readRequest reads the client's request and checks the fields the proxy
// itself relies on: stream, and the token limits it replaces on the prefill
// leg (a bad one would reach only decode, after prefill held the blocks).
// status 0: the client went away.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request) (c *completion, status int, param, msg string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		if r.Context().Err() != nil {
			return nil, 0, "", ""
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("The request body is over %d bytes; send a shorter one.", tooBig.Limit)
		}
		return nil, http.StatusBadRequest, "", fmt.Sprintf("Reading the request body failed (%v); send it again.", err)
	}
	c = &completion{r: r, id: r.Header.Get("X-Request-Id")}
	if err := json.Unmarshal(raw, &c.fields); err != nil || c.fields == nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(raw) {
			return nil, http.StatusBadRequest, "", "The request body is not valid JSON; send a JSON object."
		}
		return nil, http.StatusBadRequest, "", "The request body must be a JSON object."
	}
	if s, ok := c.fields["stream"]; ok && string(s) != "null" {
		if json.Unmarshal(s, &c.stream) != nil {
			return nil, http.StatusBadRequest, "stream", "stream must be true or false, got " + jsonKind(s, "write it without quotes") + "."
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		v, ok := c.fields[k]
		if !ok || string(v) == "null" {
			continue
		}
		var n int
		if json.Unmarshal(v, &n) != nil {
			return nil, http.StatusBadRequest, k, k + " must be an integer, got " + jsonKind(v, "write the number without quotes") + "."
		}
		if n < 1 {
			return nil, http.StatusBadRequest, k, fmt.Sprintf("%s must be at least 1, got %d.", k, n)
		}
	}
	if c.id == "" {
		c.id = newRequestID()
	}
	c.log = p.log.With(zap.String("request_id", c.id))
	return c, 0, "", ""
}

// jsonKind names a JSON value for an error message, with quoted (what to do)
// when it is a string; the words are the engine's.
func jsonKind(v json.RawMessage, quoted string) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string; " + quoted
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	}
	return string(v)
}

// checkedCompletions checks a /v1/completions request as readRequest does
// before serveCompletions serves it, so that its errors name the field in
// the client's terms and a bad max_tokens never reaches a prefill engine.
func (p *Proxy) checkedCompletions(w http.ResponseWriter, r *http.Request) {
	c, status, param, msg := p.readRequest(w, r)
	if c == nil {
		p.requests.Add(1)
		if status == 0 {
			p.cancelled.Add(1)
			return
		}
		p.failed.Add(1)
		writeParamError(w, status, param, msg)
		return
	}
	raw, _ := json.Marshal(c.fields) // the values byte for byte, as serveCompletions keeps them
	r.Body = io.NopCloser(bytes.NewReader(raw))
	p.serveCompletions(w, r)
}

// sendTo posts body to path on e with the leg headers.
func (p *Proxy) sendTo(ctx context.Context, c *completion, e *engine, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(body))
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

// chatPrefillLeg runs a whole chat prefill leg and returns the answer's body.
func (p *Proxy) chatPrefillLeg(ctx context.Context, c *completion, e *engine, body []byte) ([]byte, *legError) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.sendTo(ctx, c, e, chatPath, body)
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
	if !json.Valid(out) {
		e.markDown()
		return nil, &legError{status: http.StatusBadGateway, retryable: true,
			msg: fmt.Sprintf("%s engine %s answered %d without a JSON body (%d bytes)", e.role, e.url, resp.StatusCode, len(out))}
	}
	return out, nil
}

// with returns c with field k set to v (c's fields are not changed).
func (c *completion) with(k string, v json.RawMessage) *completion {
	d := *c
	d.fields = make(map[string]json.RawMessage, len(c.fields)+1)
	for a, b := range c.fields {
		d.fields[a] = b
	}
	d.fields[k] = v
	return &d
}

// pullChat is servePull for chat with the token-id hand-off, and its retries:
// another prefill engine when prefill fails with a 5xx or a connection error,
// or when decode answers a 5xx before streaming; another decode engine, with
// the same KV, when decode could not be reached. One retry per request.
func (p *Proxy) pullChat(w http.ResponseWriter, c *completion) {
	prefillBody := c.with("return_token_ids", json.RawMessage("true")).body(map[string]any{
		"do_remote_decode":  true,
		"do_remote_prefill": false,
		"remote_engine_id":  nil,
		"remote_block_ids":  nil,
		"remote_host":       nil,
		"remote_port":       nil,
	}, true)
	var triedP, triedD []*engine
	var last *legError
	retried := false
	retry := func(le *legError, what string, fields ...zap.Field) bool {
		last = le
		if !le.retryable || retried {
			return false
		}
		retried = true
		p.retried.Add(1)
		c.log.Info(what, append(fields, zap.String("error", le.msg))...)
		return true
	}
	for {
		pools := p.pools()
		pe, releaseP := p.pick(pools.prefill, &p.rrPrefill, p.cfg.Policy, func(e *engine) bool {
			return p.hasPartner(pools.decode, e)
		}, triedP...)
		if pe == nil {
			if last == nil {
				last = p.noPair(pools.prefill, pools.decode, rolePrefill)
			}
			p.fail(w, c, last)
			return
		}
		answer, le := p.chatPrefillLeg(c.r.Context(), c, pe, prefillBody)
		releaseP()
		if le != nil {
			triedP = append(triedP, pe)
			if retry(le, "chat prefill failed, retrying on another engine", zap.String("engine", pe.url)) {
				continue
			}
			p.fail(w, c, le)
			return
		}
		last = nil
		var pa struct {
			KV  json.RawMessage `json:"kv_transfer_params"`
			IDs json.RawMessage `json:"prompt_token_ids"`
		}
		if err := json.Unmarshal(answer, &pa); err != nil || len(pa.KV) == 0 || string(pa.KV) == "null" {
			p.fail(w, c, &legError{status: http.StatusBadGateway,
				msg: "The prefill engine's chat answer carries no kv_transfer_params; is it a kv_producer with the NIXL connector?"})
			return
		}
		if len(pa.IDs) == 0 || string(pa.IDs) == "null" {
			p.fail(w, c, &legError{status: http.StatusBadGateway,
				msg: "The prefill engine's chat answer carries no prompt_token_ids; it must support return_token_ids."})
			return
		}
		decodeBody := c.with("prompt_token_ids", pa.IDs).body(pa.KV, false)
		for {
			accept := func(e *engine) bool { return compatible(pe, e) }
			de, releaseD := p.pick(p.pools().decode, &p.rrDecode, PolicyLeastOutstanding, accept, triedD...)
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
			ctx, cancel := context.WithTimeout(c.r.Context(), p.cfg.RequestTimeout)
			resp, err := p.sendTo(ctx, c, de, chatPath, decodeBody)
			if err != nil {
				le := p.transportError(c, ctx, de, err)
				releaseD()
				cancel()
				triedD = append(triedD, de)
				if isDialError(err) && retry(le, "chat decode unreachable, retrying on another decode engine", zap.String("engine", de.url)) {
					continue
				}
				p.fail(w, c, le)
				return
			}
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				le := statusError(de, resp)
				releaseD()
				cancel()
				triedP, triedD = append(triedP, pe), append(triedD, de)
				if retry(le, "chat decode failed before answering, retrying on another prefill engine",
					zap.String("prefill", pe.url), zap.String("decode", de.url)) {
					break
				}
				p.fail(w, c, le)
				return
			}
			p.relay(w, c, ctx, de, resp)
			releaseD()
			cancel()
			return
		}
	}
}
