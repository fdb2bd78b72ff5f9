package pd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gonixl/gonixl/examples/render/chat"
	renderserver "github.com/gonixl/gonixl/examples/render/server"
	"go.uber.org/zap"
)

// derenderHop is what the derender hop of one request needs: the render
// server that rendered it (tried first), the original chat request, and
// the rendered prompt.
type derenderHop struct {
	rs        *renderServer
	req       *chat.Request
	promptIDs []int
}

// serveRenderChat serves POST /v1/chat/completions through the render
// tier: render, the P/D legs on token ids, derender.
func (p *Proxy) serveRenderChat(w http.ResponseWriter, c *completion) {
	raw, _ := json.Marshal(c.fields)
	var req chat.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		p.fail(w, c, &legError{status: http.StatusBadRequest, msg: fmt.Sprintf("The request is not a chat completion request: %v.", err)})
		return
	}
	var gen *renderserver.GenerateRequest
	rs, le := p.onRenderServer(c, hopRender, nil, func(ctx context.Context, rs *renderServer) error {
		var err error
		gen, err = rs.client.Render(ctx, &req)
		return err
	})
	if le != nil {
		p.fail(w, c, le)
		return
	}
	genRaw, err := json.Marshal(gen)
	var fields map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(genRaw, &fields)
	}
	if err != nil {
		p.fail(w, c, &legError{status: http.StatusBadGateway, msg: fmt.Sprintf("render server %s: its render answer could not be passed on: %v", rs.url, err)})
		return
	}
	g := *c
	g.fields, g.tokens = fields, true
	g.derender = &derenderHop{rs: rs, req: &req, promptIDs: gen.TokenIDs}
	if p.connector == ConnectorPush {
		p.servePush(w, &g, generatePath)
		return
	}
	p.servePull(w, &g, tokensRoute(&g))
}

// tokensRoute is the P/D legs of a rendered chat on pull: decode gets the
// generate request with prefill's kv_transfer_params.
func tokensRoute(c *completion) pullRoute {
	return pullRoute{path: generatePath, prefill: c.body(prefillKeys, true), decode: func(answer []byte) ([]byte, *legError) {
		kv, le := kvParams(answer)
		if le != nil {
			return nil, le
		}
		return c.body(kv, false), nil
	}}
}

// prefillTokens limits a generate request's prefill leg to one token:
// sampling_params.max_tokens 1 (render wrote sampling_params, an object).
func prefillTokens(m map[string]json.RawMessage) {
	var sp map[string]json.RawMessage
	_ = json.Unmarshal(m["sampling_params"], &sp)
	if sp == nil {
		sp = map[string]json.RawMessage{}
	}
	sp["max_tokens"] = json.RawMessage("1")
	m["sampling_params"], _ = json.Marshal(sp)
}

// relayDerender answers the client from decode's generate answer through
// the derender hop: the whole answer in one call, a stream chunk by chunk.
// It says whether the whole answer reached the client.
func (p *Proxy) relayDerender(w http.ResponseWriter, c *completion, ctx context.Context, de *engine, resp *http.Response) bool {
	defer resp.Body.Close()
	w.Header().Set("X-Request-Id", c.id)
	if !c.stream {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
		if err != nil {
			le := p.transportError(c, ctx, de, err)
			le.msg = "decode answer broke off: " + le.msg
			p.fail(w, c, le)
			return false
		}
		var gr renderserver.GenerateTokensResponse
		if err := json.Unmarshal(body, &gr); err != nil {
			de.markDown()
			p.fail(w, c, &legError{status: http.StatusBadGateway,
				msg: fmt.Sprintf("decode engine %s answered %d without a generate answer (%d bytes)", de.url, resp.StatusCode, len(body))})
			return false
		}
		d := c.derender
		var out *renderserver.ChatCompletionResponse
		_, le := p.onRenderServer(c, hopDerender, d.rs, func(ctx context.Context, rs *renderServer) error {
			var err error
			out, err = rs.client.DerenderResponse(ctx, &renderserver.DerenderChatRequest{Model: d.req.Model, GenerateResponse: gr,
				PromptTokenIDs: d.promptIDs, ChatRequest: d.req})
			return err
		})
		if le != nil {
			p.fail(w, c, le)
			return false
		}
		b, _ := json.Marshal(out)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		p.met.firstToken(c)
		if _, err := w.Write(b); err != nil {
			p.cancelled.Add(1)
			return false
		}
		return true
	}
	return p.relayDerenderStream(w, c, ctx, de, resp)
}

// generateChunk is an event of decode's generate stream: token ids, or
// the closing usage, or an error.
type generateChunk struct {
	Error   json.RawMessage       `json:"error"`
	Usage   *renderserver.Usage   `json:"usage"`
	Choices []generateChunkChoice `json:"choices"`
}

type generateChunkChoice struct {
	TokenIDs     []int           `json:"token_ids"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
}

// relayDerenderStream derenders decode's generate stream event by event
// into chat.completion.chunk events. The chunks' derender time is the
// derender hop's (one observation per stream).
func (p *Proxy) relayDerenderStream(w http.ResponseWriter, c *completion, ctx context.Context, de *engine, resp *http.Response) bool {
	d := c.derender
	rs := d.rs
	hctx := context.WithValue(ctx, hopKey{}, hopHeaders{requestID: c.id, auth: c.r.Header.Get("Authorization")})
	hctx, span := p.tracer().Start(hctx, "proxy."+hopDerender+"_hop")
	defer span.End()
	cs := rs.client.NewStream(d.req, d.promptIDs)
	var spent time.Duration
	chunks := 0
	ok := false
	defer func() {
		p.met.legs.WithLabelValues(hopDerender, map[bool]string{true: "ok", false: "error"}[ok]).Observe(spent.Seconds())
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	model := d.req.Model
	if info := de.kvInfo(); model == "" && info != nil {
		model = info.Model
	}
	base := renderserver.ChatCompletionChunk{ID: "chatcmpl-" + c.id, Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: model}
	write := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			p.cancelled.Add(1)
			return false
		}
		if chunks == 0 {
			p.met.firstToken(c)
		}
		chunks++
		_ = rc.Flush()
		return true
	}
	breakOff := func(msg string) bool {
		p.failed.Add(1)
		c.log.Warn("render stream broke off", zap.String("error", msg))
		ev := bytes.TrimSuffix(errorJSON(http.StatusBadGateway, "", msg), []byte("\n"))
		_, _ = fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", ev)
		_ = rc.Flush()
		return false
	}
	roleSent := false
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		if data, found := bytes.CutPrefix(line, []byte("data: ")); found {
			if string(data) == "[DONE]" {
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
				_ = rc.Flush()
				ok = true
				return true
			}
			var ev generateChunk
			if jerr := json.Unmarshal(data, &ev); jerr != nil {
				return breakOff(fmt.Sprintf("decode engine %s sent a stream event that is not JSON: %v", de.url, jerr))
			}
			if len(ev.Error) > 0 && string(ev.Error) != "null" {
				if _, werr := fmt.Fprintf(w, "data: %s\n\n", data); werr != nil { // the engine's error event, as relay passes it
					p.cancelled.Add(1)
					return false
				}
				continue
			}
			if len(ev.Choices) == 0 {
				if ev.Usage != nil {
					u := base
					u.Choices, u.Usage = []renderserver.ChunkChoice{}, ev.Usage
					if !write(u) {
						return false
					}
				}
				continue
			}
			ch := ev.Choices[0]
			finish := ""
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
			start := time.Now()
			delta, derr := cs.Next(hctx, ch.TokenIDs, finish)
			spent += time.Since(start)
			if derr != nil {
				le := p.renderError(c, hctx, rs, hopDerender, derr)
				if le.cancelled {
					p.cancelled.Add(1)
					return false
				}
				return breakOff("derender hop failed: " + le.msg)
			}
			if delta.Empty() && finish == "" && roleSent {
				continue
			}
			cd := renderserver.ChunkDelta{Delta: delta}
			if !roleSent {
				cd.Role, roleSent = "assistant", true
			}
			if finish == "stop" && cs.ToolsStreamed() {
				finish = "tool_calls"
			}
			out := base
			out.Choices = []renderserver.ChunkChoice{{Delta: cd}}
			if finish != "" {
				out.Choices[0].FinishReason = &finish
			}
			if !write(out) {
				return false
			}
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				de.markDown()
				return breakOff(fmt.Sprintf("decode engine %s ended the stream without [DONE]", de.url))
			}
			le := p.transportError(c, ctx, de, err)
			if le.cancelled {
				p.cancelled.Add(1)
				return false
			}
			return breakOff("decode stream broke off: " + le.msg)
		}
	}
}
