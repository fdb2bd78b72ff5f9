package pd_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stack is a prefill and a decode engine of examples/engine (loopback agents) behind a
// proxy, over real HTTP.
type stack struct {
	pre, dec *server.Server
	front    *httptest.Server
}

func newStack(t *testing.T, conn string) *stack {
	t.Helper()
	return newStackOf(t, conn, tinyModel, tinyModel)
}

var tinyModel = server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 4, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}

// newStackOf is newStack with a model per engine.
func newStackOf(t *testing.T, conn string, prefillModel, decodeModel server.ModelSpec) *stack {
	t.Helper()
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(role string) *server.Server {
		model := prefillModel
		if role == server.RoleDecode {
			model = decodeModel
		}
		s, err := server.New(server.Config{Role: role, Connector: conn, EngineID: role + "-" + conn, Model: model, NumBlocks: 64,
			NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	st := &stack{pre: mk(server.RolePrefill), dec: mk(server.RoleDecode)}
	p, err := pd.New(pd.Config{Prefill: []string{st.pre.URL()}, Decode: []string{st.dec.URL()}, HealthInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st.front = httptest.NewServer(p)
	t.Cleanup(func() {
		st.front.Close()
		p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []*server.Server{st.dec, st.pre} {
			if err := s.Close(ctx); err != nil {
				t.Error(err)
			}
		}
		fab.Close()
	})
	return st
}

func (st *stack) post(t *testing.T, path, reqID, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, st.front.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	resp, err := st.front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var created = regexp.MustCompile(`"created":\d+`)

// TestChatThroughProxy streams and answers a chat through the proxy (pull, prompt token
// ids handed from prefill to decode) and checks the bytes against /v1/completions of the
// templated prompt through the same proxy.
func TestChatThroughProxy(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		t.Run(conn, func(t *testing.T) { chatThroughProxy(t, conn) })
	}
}

// chatThroughProxy: a chat through a proxy of connector conn streams, and
// answers whole, what /v1/completions answers for the templated prompt, with
// the KV decode verified.
func chatThroughProxy(t *testing.T, conn string) {
	st := newStack(t, conn)
	msgs := []server.ChatMessage{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: "Which fox jumps over the lazy dog?"}}
	prompt, _ := json.Marshal(server.ChatPrompt(msgs))
	mj, _ := json.Marshal(msgs)

	// The completion probe still streams; its tokens are the reference.
	resp, body := st.post(t, "/v1/completions", "cmp-1", `{"model":"tiny","prompt":`+string(prompt)+`,"max_tokens":3,"stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("completion stream: %d %q", resp.StatusCode, body)
	}
	var toks []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "data: [DONE]\n\n"), "\n\n") {
		if ev == "" {
			continue
		}
		var c struct {
			Choices []struct{ Text string }
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("completion chunk %q", ev)
		}
		toks = append(toks, c.Choices[0].Text)
	}
	if len(toks) != 3 {
		t.Fatalf("completion tokens %q", toks)
	}

	resp, body = st.post(t, "/v1/chat/completions", "chat-1", `{"model":"tiny","messages":`+string(mj)+`,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") != "chat-1" {
		t.Fatalf("chat stream: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	head := `data: {"id":"chatcmpl-chat-1","object":"chat.completion.chunk","created":0,"model":"tiny","choices":`
	want := head + `[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		head + `[{"index":0,"delta":{"content":"` + toks[0] + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		head + `[{"index":0,"delta":{"content":"` + toks[1] + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		head + `[{"index":0,"delta":{"content":"` + toks[2] + `"},"logprobs":null,"finish_reason":"length"}]}` + "\n\n" +
		head + `[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}` + "\n\n" +
		"data: [DONE]\n\n"
	if got := created.ReplaceAllString(body, `"created":0`); got != want {
		t.Errorf("chat stream:\n got %q\nwant %q", got, want)
	}

	resp, body = st.post(t, "/v1/chat/completions", "chat-2", `{"model":"tiny","messages":`+string(mj)+`,"max_tokens":3}`)
	want = `{"id":"chatcmpl-chat-2","object":"chat.completion","created":0,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Join(toks, "") + `"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}` + "\n"
	if got := created.ReplaceAllString(body, `"created":0`); resp.StatusCode != 200 || got != want {
		t.Errorf("chat:\n got %d %q\nwant %q", resp.StatusCode, got, want)
	}
	if s := st.dec.Stats(); s.KVVerifyFailures != 0 || s.KVBytesVerified == 0 {
		t.Errorf("decode stats %+v", s)
	}
}

// TestProxyErrorBodies checks the exact bodies of the errors a client gets through the
// proxy: the proxy's own, and the engines' passed through (n > 1 is refused on both
// routes).
func TestProxyErrorBodies(t *testing.T) {
	st := newStack(t, "pull")
	msgs := `[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/completions", `{"model":"tiny","prompt":"a b c","n":2}`, 400,
			`{"error":{"message":"n must be 1, got 2: this engine returns one choice per request; send 2 requests instead.","type":"invalid_request_error","param":"n","code":400}}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":` + msgs + `,"n":2}`, 400,
			`{"error":{"message":"n must be 1, got 2: this engine returns one choice per request; send 2 requests instead.","type":"invalid_request_error","param":"n","code":400}}`},
		{"/v1/completions", `{"model":"tiny","prompt":"a","max_tokens":"8"}`, 400,
			`{"error":{"message":"max_tokens must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"/v1/completions", `{"model":"tiny","prompt":"a","max_tokens":0}`, 400,
			`{"error":{"message":"max_tokens must be at least 1, got 0.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"/v1/completions", `[1]`, 400,
			`{"error":{"message":"The request body must be a JSON object.","type":"invalid_request_error","param":null,"code":400}}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":` + msgs + `,"max_tokens":"8"}`, 400,
			`{"error":{"message":"max_tokens must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":` + msgs + `,"stream":"yes"}`, 400,
			`{"error":{"message":"stream must be true or false, got a string; write it without quotes.","type":"invalid_request_error","param":"stream","code":400}}`},
		{"/v1/chat/completions", `{"model":`, 400,
			`{"error":{"message":"The request body is not valid JSON; send a JSON object.","type":"invalid_request_error","param":null,"code":400}}`},
		{"/v1/chat/completions", `[1]`, 400,
			`{"error":{"message":"The request body must be a JSON object.","type":"invalid_request_error","param":null,"code":400}}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":[]}`, 400,
			`{"error":{"message":"messages is empty; send a list of {\"role\": \"user\", \"content\": \"...\"} objects.","type":"invalid_request_error","param":"messages","code":400}}`},
		{"/v1/chat/completions", `{"model":"big","messages":` + msgs + `}`, 404,
			"{\"error\":{\"message\":\"The model `big` does not exist; this engine serves `tiny` (GET /v1/models).\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":404}}"},
		{"/v1/nothing", `{}`, 404,
			`{"error":{"message":"No route POST /v1/nothing on the P/D proxy; it serves POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /healthcheck and GET /metrics.","type":"invalid_request_error","param":null,"code":404}}`},
	} {
		resp, body := st.post(t, tc.path, "", tc.body)
		if resp.StatusCode != tc.code || body != tc.want+"\n" {
			t.Errorf("%s %s:\n got %d %s\nwant %d %s", tc.path, tc.body, resp.StatusCode, body, tc.code, tc.want)
		}
	}
	resp, err := st.front.Client().Get(st.front.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"error":{"message":"use POST for /v1/chat/completions","type":"invalid_request_error","param":null,"code":405}}` + "\n"; resp.StatusCode != 405 || string(b) != want || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET chat: %d %s", resp.StatusCode, b)
	}
}
