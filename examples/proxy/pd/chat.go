package pd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"
)

const chatPath = "/v1/chat/completions"

// serveChat proxies POST /v1/chat/completions. On pull it hands off token
// ids: the prefill leg asks for return_token_ids, and the decode leg gets
// prefill's prompt_token_ids with its kv_transfer_params, so decode serves
// exactly the tokens whose KV it loads instead of rendering the chat template
// again. On push both legs start at once, before prefill has answered, so
// both get the chat request and render it: the engines of one deployment
// share the template and the tokenizer, which gives both the same tokens.
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
	if p.render != nil {
		p.serveRenderChat(w, c)
		return
	}
	if p.connector == ConnectorPush {
		p.servePush(w, c, chatPath)
		return
	}
	p.servePull(w, c, p.bidirChatRoute(c))
}

// readRequest reads the client's request and checks the fields the proxy
// itself relies on: stream, and the token limits it replaces on the prefill
// leg (a bad one would reach only decode, after prefill held the blocks).
// status 0: the client went away.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request) (c *completion, status int, param, msg string) {
	start := time.Now() // TTFT counts from here, reading the body included
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
	c = &completion{r: r, id: r.Header.Get("X-Request-Id"), start: start, legs: &legClock{}}
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
	p.serveCompletions(w, r, c.start)
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

// chatRoute is /v1/chat/completions on pull with the token-id hand-off:
// prefill is asked for return_token_ids, and decode gets prefill's
// prompt_token_ids with its kv_transfer_params.
func chatRoute(c *completion) pullRoute {
	return pullRoute{path: chatPath, prefill: c.with("return_token_ids", json.RawMessage("true")).body(prefillKeys, true),
		decode: func(answer []byte) ([]byte, *legError) {
			kv, le := kvParams(answer)
			if le != nil {
				return nil, le
			}
			var pa struct {
				IDs json.RawMessage `json:"prompt_token_ids"`
			}
			if err := json.Unmarshal(answer, &pa); err != nil || len(pa.IDs) == 0 || string(pa.IDs) == "null" {
				return nil, &legError{status: http.StatusBadGateway,
					msg: "The prefill engine's chat answer carries no prompt_token_ids; it must support return_token_ids."}
			}
			return c.with("prompt_token_ids", pa.IDs).body(kv, false), nil
		}}
}
