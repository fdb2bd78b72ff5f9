package pd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/examples/render/chat"
	renderserver "github.com/gonixl/gonixl/examples/render/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// chatStack is a P/D pair of simulated engines behind the proxy: with the
// render tier (tokens-only engines, a render server, the three hops) or in
// process (engines that run the chat pipeline themselves).
type chatStack struct {
	front           *httptest.Server
	proxy           *pd.Proxy
	prefill, decode *server.Server
	render          *httptest.Server // nil in process
}

var chatModel = server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 4, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}

func newChatStack(t *testing.T, conn string, renderTier, localStream bool) *chatStack {
	t.Helper()
	return newChatStackWith(t, conn, renderTier, localStream, nil)
}

// newChatStackWith is newChatStack whose render server's handler is
// wrapRender's wrapping of it (nil: as it is).
func newChatStackWith(t *testing.T, conn string, renderTier, localStream bool, wrapRender func(http.Handler) http.Handler) *chatStack {
	t.Helper()
	pipe, err := chat.New(chat.Config{})
	if err != nil {
		t.Fatal(err)
	}
	replies := server.ReplyScript(pipe, server.DemoReplyTexts)
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	st := &chatStack{}
	mk := func(role string) *server.Server {
		cfg := server.Config{Role: role, Connector: conn, EngineID: role + "-" + conn, Model: chatModel, NumBlocks: 64, Replies: replies,
			NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }}
		if renderTier {
			cfg.TokensOnly, cfg.VocabSize = true, pipe.Tokenizer().VocabSize()
		} else {
			cfg.Chat = pipe
		}
		s, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	st.prefill, st.decode = mk(server.RolePrefill), mk(server.RoleDecode)
	cfg := pd.Config{Prefill: []string{st.prefill.URL()}, Decode: []string{st.decode.URL()}, HealthInterval: time.Hour}
	if renderTier {
		rsrv, err := renderserver.New(renderserver.Config{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		h := rsrv.Handler()
		if wrapRender != nil {
			h = wrapRender(h)
		}
		st.render = httptest.NewServer(h)
		cfg.Render = []string{st.render.URL}
		if localStream {
			cfg.RenderPipeline = pipe
		}
	}
	st.proxy, err = pd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.front = httptest.NewServer(st.proxy)
	t.Cleanup(func() {
		st.front.Close()
		st.proxy.Close()
		if st.render != nil {
			st.render.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []*server.Server{st.decode, st.prefill} {
			if err := s.Close(ctx); err != nil {
				t.Error(err)
			}
		}
		fab.Close()
	})
	return st
}

// chatAnswer is what the comparison reads of a chat answer, whole or
// gathered from a stream's deltas; tool call ids are left out (random).
type chatAnswer struct {
	Content, Reasoning string
	ToolCalls          []string // name + " " + arguments
	FinishReason       string
	Chunks             []string // a stream's deltas, JSON, ids left out
}

func (st *chatStack) chat(t *testing.T, id, body string) (int, chatAnswer, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, st.front.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", id)
	resp, err := st.front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a chatAnswer
	if resp.StatusCode != 200 {
		return resp.StatusCode, a, string(raw)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var c struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("%v: %s", err, raw)
		}
		m := c.Choices[0].Message
		if m.Content != nil {
			a.Content = *m.Content
		}
		if m.Reasoning != nil {
			a.Reasoning = *m.Reasoning
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, tc.Function.Name+" "+tc.Function.Arguments)
		}
		a.FinishReason = c.Choices[0].FinishReason
		return 200, a, string(raw)
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 1<<20)
	var done bool
	args := map[int]*strings.Builder{}
	names := map[int]string{}
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta        chat.Delta `json:"delta"`
				FinishReason *string    `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("%v: %s", err, d)
		}
		if len(c.Choices) == 0 {
			continue
		}
		ch := c.Choices[0]
		a.Content += ch.Delta.Content
		a.Reasoning += ch.Delta.Reasoning
		for i := range ch.Delta.ToolCalls {
			tc := &ch.Delta.ToolCalls[i]
			if args[tc.Index] == nil {
				args[tc.Index] = &strings.Builder{}
			}
			if tc.Function != nil {
				names[tc.Index] += tc.Function.Name
				args[tc.Index].WriteString(tc.Function.Arguments)
			}
			tc.ID = ""
		}
		if ch.FinishReason != nil {
			a.FinishReason = *ch.FinishReason
		}
		b, _ := json.Marshal(ch)
		a.Chunks = append(a.Chunks, string(b))
	}
	if !done {
		t.Fatalf("stream without [DONE]: %s", raw)
	}
	for i := range len(args) {
		a.ToolCalls = append(a.ToolCalls, names[i]+" "+args[i].String())
	}
	return 200, a, string(raw)
}

const weatherTool = `[{"type":"function","function":{"name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}}}]`

// chatBodies are the comparison's requests: several prompts (the KV
// checksum picks each one's reply), with tools, and without them with
// thinking off.
func chatBodies(stream bool) []string {
	var out []string
	for i := range 9 {
		extra := `,"tools":` + weatherTool
		if i%3 == 2 {
			extra = `,"chat_template_kwargs":{"enable_thinking":false}`
		}
		so := ""
		if stream {
			so = `,"stream_options":{"include_usage":true}`
		}
		out = append(out, fmt.Sprintf(`{"model":"tiny","messages":[{"role":"system","content":"You are brief."},{"role":"user","content":"Question %d: what is the weather in Paris, and what moved the KV cache?"}],"max_tokens":64,"stream":%v%s%s}`,
			i, stream, so, extra))
	}
	return out
}

// TestRenderTierMatchesInProcess sends the same chat requests, streamed and
// not, to an in-process P/D stack (engines that run the chat pipeline) and
// to the three-hop render stack (render, P/D on token ids, derender), pull
// and push, with the stream derendered in the proxy and by the render
// server's stateless streaming derender: content, reasoning, tool calls,
// finish reasons and each stream's deltas are the same, every reply shows
// up, and both decode engines verified the KV they loaded.
func TestRenderTierMatchesInProcess(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		for _, local := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/local_stream=%v", conn, local), func(t *testing.T) {
				inproc := newChatStack(t, conn, false, false)
				tier := newChatStack(t, conn, true, local)
				kinds := map[string]bool{}
				for _, stream := range []bool{false, true} {
					for i, body := range chatBodies(stream) {
						id := fmt.Sprintf("cmp-%v-%d", stream, i)
						sa, a, rawA := inproc.chat(t, id, body)
						sb, b, rawB := tier.chat(t, id, body)
						if sa != 200 || sb != 200 {
							t.Fatalf("request %s: in process %d %s; render tier %d %s", id, sa, rawA, sb, rawB)
						}
						ja, _ := json.Marshal(a)
						if testing.Verbose() && i < 3 {
							t.Logf("%s: %s", id, ja)
						}
						jb, _ := json.Marshal(b)
						if string(ja) != string(jb) {
							t.Errorf("request %s:\nin process  %s\nrender tier %s", id, ja, jb)
						}
						switch {
						case len(a.ToolCalls) > 0:
							kinds["tool call"] = true
							if a.FinishReason != "tool_calls" || a.ToolCalls[0] != `get_weather {"city": "Paris", "unit": "celsius"}` {
								t.Errorf("request %s: tool call %+v", id, a)
							}
						case a.Reasoning != "" && a.Content != "":
							kinds["reasoning and content"] = true
						default:
							kinds["other"] = true
						}
					}
				}
				if !kinds["tool call"] || !kinds["reasoning and content"] {
					t.Errorf("the replies seen: %v; want a tool call and a reasoned answer", kinds)
				}
				for name, st := range map[string]*chatStack{"in process": inproc, "render tier": tier} {
					if s := st.decode.Stats(); s.KVBytesVerified == 0 || s.KVVerifyFailures != 0 || s.RequestsDone != 18 {
						t.Errorf("%s: decode stats %+v", name, s)
					}
					if s := st.proxy.Stats(); s.Requests != 18 || s.Failed != 0 || s.Retried != 0 {
						t.Errorf("%s: proxy stats %+v", name, s)
					}
				}
			})
		}
	}
}

// TestRenderServerDown: a render server that never answered its health
// check is out of rotation (503 naming it and why); one that goes away
// after its check passed is a 502 naming it, and the engines saw nothing.
func TestRenderServerDown(t *testing.T) {
	st := newChatStack(t, "pull", true, true)
	body := chatBodies(false)[0]
	if code, _, raw := st.chat(t, "up", body); code != 200 {
		t.Fatalf("render tier up: %d %s", code, raw)
	}
	url := st.render.URL
	st.render.Close()
	addr := strings.TrimPrefix(url, "http://")
	code, _, raw := st.chat(t, "gone", body)
	want := fmt.Sprintf(`{"error":{"message":"render server %s could not be reached for the render hop: dial tcp %s: connect: connection refused","type":"server_error","param":null,"code":502}}`+"\n", url, addr)
	if code != 502 || raw != want {
		t.Errorf("render server gone:\n got %d %s\nwant 502 %s", code, raw, want)
	}

	// A proxy whose render server is down from the start.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	p, err := pd.New(pd.Config{Prefill: []string{st.prefill.URL()}, Decode: []string{st.decode.URL()}, Render: []string{down}, HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()
	resp, err := front.Client().Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want = fmt.Sprintf(`{"error":{"message":"no render server in rotation (render server %s: Get \"%s/health\": dial tcp %s: connect: connection refused)","type":"server_error","param":null,"code":503}}`+"\n", down, down, l.Addr())
	if resp.StatusCode != 503 || string(b) != want {
		t.Errorf("render server down from the start:\n got %d %s\nwant 503 %s", resp.StatusCode, b, want)
	}
	resp, err = front.Client().Get(front.URL + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), `"render_in_rotation":0`) {
		t.Errorf("healthcheck: %d %s", resp.StatusCode, b)
	}
	if s := st.decode.Stats(); s.RequestsDone != 1 {
		t.Errorf("decode engine saw more than the first request: %+v", s)
	}
}

// A render server that closes a kept-alive connection as the proxy sends a
// hop on it (restarted, or its keep-alive timeout ran out then: vLLM's
// closes idle connections after 5 s, the proxy keeps them 90 s) costs the
// client nothing: the hop goes again on a new connection. Here the render
// server hangs up on the second request of every connection, so every hop
// after the first meets a closed connection.
func TestRenderHopResentWhenKeptAliveConnectionCloses(t *testing.T) {
	var mu sync.Mutex
	perConn := map[string]int{} // requests by the proxy's address
	hungUp, served := 0, 0      // hops
	st := newChatStackWith(t, "pull", true, false, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			perConn[r.RemoteAddr]++
			hang := perConn[r.RemoteAddr] == 2
			if hang {
				hungUp++
			} else if r.Method == http.MethodPost {
				served++
			}
			mu.Unlock()
			if hang {
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	for i, body := range append(chatBodies(false)[:2], chatBodies(true)[:2]...) {
		if code, _, raw := st.chat(t, fmt.Sprint("r", i), body); code != 200 {
			t.Fatalf("chat %d: %d %s", i, code, raw)
		}
	}
	if s := st.proxy.Stats(); s.Requests != 4 || s.Failed != 0 || s.Retried != 0 {
		t.Errorf("proxy stats %+v: want 4 requests, none failed or retried", s)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each chat is a render hop and one derender hop or more (8 at least),
	// each served on a new connection; every one but perhaps the first (the
	// health check's connection may be gone) first met the closed
	// connection its predecessor left kept alive.
	if served < 8 || hungUp < served-1 || hungUp > served {
		t.Errorf("%d hops served, %d met a closed connection: want 8 hops at least, each but perhaps the first after a closed connection", served, hungUp)
	}
}
