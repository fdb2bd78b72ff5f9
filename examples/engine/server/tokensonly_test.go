package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// reply is the one reply script of the tokens-only tests' engines: every
// request answers it, whatever its KV checksum.
var reply = []int{501, 502, 503, 504, 505}

func tokensOnlyPair(t *testing.T, conn string, replies [][]int) *pair {
	return newPair(t, conn, opts{configure: func(_ string, c *server.Config) {
		c.TokensOnly, c.Replies = true, replies
	}})
}

// genResponse is a whole answer of /inference/v1/generate, the fields the
// tests read.
type genResponse struct {
	RequestID string `json:"request_id"`
	Usage     struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		FinishReason string `json:"finish_reason"`
		StopReason   any    `json:"stop_reason"`
		TokenIDs     []int  `json:"token_ids"`
	} `json:"choices"`
	KVTransferParams map[string]any `json:"kv_transfer_params"`
}

func (p *pair) postPath(t *testing.T, url, path, reqID string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	hr, _ := http.NewRequest("POST", url+path, bytes.NewReader(b))
	hr.Header.Set("Content-Type", "application/json")
	if reqID != "" {
		hr.Header.Set("X-Request-Id", reqID)
	}
	resp, err := p.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func (p *pair) generate(t *testing.T, url, reqID string, body map[string]any) genResponse {
	t.Helper()
	resp, out := p.postPath(t, url, "/inference/v1/generate", reqID, body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s/inference/v1/generate: %d %s", url, resp.StatusCode, out)
	}
	var g genResponse
	if err := json.Unmarshal(out, &g); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return g
}

var promptIDs = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

func genReq(sp map[string]any) map[string]any {
	return map[string]any{"model": "tiny", "token_ids": promptIDs, "sampling_params": sp}
}

// genDisagg runs one generate request through both engines as the proxy
// does (pull: prefill, then decode with its params; push: decode first,
// then prefill) and returns the prefill and decode answers.
func (p *pair) genDisagg(t *testing.T, id string, body map[string]any) (pre, dec genResponse) {
	t.Helper()
	preBody := with(with(body, "sampling_params", map[string]any{"max_tokens": 1}), "stream", false)
	if p.prefill.Info().Connector == server.ConnPull {
		pre = p.generate(t, p.prefill.URL(), id, with(preBody, "kv_transfer_params", map[string]any{"do_remote_decode": true}))
		if pre.KVTransferParams["do_remote_prefill"] != true {
			t.Fatalf("prefill kv_transfer_params %v", pre.KVTransferParams)
		}
		return pre, p.generate(t, p.decode.URL(), id, with(body, "kv_transfer_params", pre.KVTransferParams))
	}
	info := p.prefill.Info()
	tid := "xfer-" + id
	var wg sync.WaitGroup
	wg.Go(func() { // decode first: it registers while prefill computes
		resp, out := p.postPath(t, p.decode.URL(), "/inference/v1/generate", id, with(body, "kv_transfer_params", map[string]any{
			"do_remote_prefill": true, "remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost,
			"remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": info.PPSize, "transfer_mode": "push", "transfer_id": tid}))
		if resp.StatusCode != 200 {
			t.Errorf("decode: %d %s", resp.StatusCode, out)
		}
		json.Unmarshal(out, &dec)
	})
	eventually(t, "decode registered", func() bool { return p.decode.Stats().Waiting == 1 })
	pre = p.generate(t, p.prefill.URL(), id, with(preBody, "kv_transfer_params", map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": tid}))
	wg.Wait()
	return pre, dec
}

// TestTokensOnly runs generate requests collocated, on the prefill leg and on
// the decode leg of both connectors: the reply script's tokens, its end as
// finish_reason "stop", max_tokens as "length", stop_token_ids, and decode's
// answer equal to a collocated engine's with the KV verified.
func TestTokensOnly(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := tokensOnlyPair(t, conn, [][]int{reply})
			for _, tc := range []struct {
				name       string
				sp         map[string]any
				want       []int
				finish     string
				stopReason any
			}{
				{"reply ends", map[string]any{"max_tokens": 8}, reply, "stop", nil},
				{"reply ends at max_tokens", map[string]any{"max_tokens": 5}, reply, "stop", nil},
				{"max_tokens cuts", map[string]any{"max_tokens": 3}, reply[:3], "length", nil},
				{"stop token", map[string]any{"max_tokens": 8, "stop_token_ids": []int{7, 503}}, reply[:3], "stop", float64(503)},
			} {
				local := p.generate(t, p.decode.URL(), "local", genReq(tc.sp))
				pre, dec := p.genDisagg(t, "pd-"+conn, genReq(tc.sp))
				for who, g := range map[string]genResponse{"collocated": local, "decode": dec} {
					c := g.Choices[0]
					if !slices.Equal(c.TokenIDs, tc.want) || c.FinishReason != tc.finish || c.StopReason != tc.stopReason {
						t.Errorf("%s, %s: token_ids %v finish %q stop_reason %v, want %v %q %v", tc.name, who, c.TokenIDs, c.FinishReason, c.StopReason, tc.want, tc.finish, tc.stopReason)
					}
					if u := g.Usage; u.PromptTokens != len(promptIDs) || u.CompletionTokens != len(tc.want) || u.TotalTokens != len(promptIDs)+len(tc.want) {
						t.Errorf("%s, %s: usage %+v", tc.name, who, u)
					}
				}
				// The prefill's one token is decode's first.
				if c := pre.Choices[0]; !slices.Equal(c.TokenIDs, reply[:1]) || c.FinishReason != "length" {
					t.Errorf("%s: prefill choice %+v", tc.name, c)
				}
				if local.RequestID != "generate-tokens-local" || dec.RequestID != "generate-tokens-pd-"+conn || local.KVTransferParams != nil {
					t.Errorf("%s: request ids %q %q, params %v", tc.name, local.RequestID, dec.RequestID, local.KVTransferParams)
				}
			}
			// ignore_eos runs past the reply, to max_tokens.
			g := p.generate(t, p.decode.URL(), "", genReq(map[string]any{"max_tokens": 7, "ignore_eos": true}))
			if c := g.Choices[0]; len(c.TokenIDs) != 7 || !slices.Equal(c.TokenIDs[:5], reply) || c.FinishReason != "length" {
				t.Errorf("ignore_eos: %+v", c)
			}
			if st := p.decode.Stats(); st.KVBytesVerified == 0 || st.KVVerifyFailures != 0 {
				t.Errorf("decode stats %+v", st)
			}
			idle(t, p)
		})
	}
}

// TestTokensOnlyRepliesByKV: with several replies, the KV's checksum picks
// one; the decode leg, whose checksum is of the KV it loaded, picks the
// collocated engine's.
func TestTokensOnlyRepliesByKV(t *testing.T) {
	replies := [][]int{{11, 12, 13}, {21, 22}, {31, 32, 33, 34}}
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := tokensOnlyPair(t, conn, replies)
			seen := map[int]bool{}
			for i := range 12 {
				body := with(genReq(map[string]any{"max_tokens": 10}), "token_ids", append([]int{100 + i}, promptIDs...))
				local := p.generate(t, p.prefill.URL(), "", body)
				_, dec := p.genDisagg(t, fmt.Sprintf("r%d", i), body)
				got := dec.Choices[0].TokenIDs
				if !slices.Equal(got, local.Choices[0].TokenIDs) || !slices.ContainsFunc(replies, func(r []int) bool { return slices.Equal(r, got) }) {
					t.Fatalf("prompt %d: decode %v, collocated %v", i, got, local.Choices[0].TokenIDs)
				}
				seen[got[0]] = true
			}
			if len(seen) < 2 {
				t.Errorf("12 prompts chose one reply only: %v", seen)
			}
			idle(t, p)
		})
	}
}

var created = regexp.MustCompile(`"created":\d+`)

// TestGenerateWire checks the answers' bytes: the whole answer's fields and
// their order as vLLM writes them, the stream's events, return_token_ids.
func TestGenerateWire(t *testing.T) {
	p := tokensOnlyPair(t, server.ConnPull, [][]int{reply})
	body := with(with(genReq(map[string]any{"max_tokens": 3}), "return_token_ids", true), "request_id", "body-id")
	_, out := p.postPath(t, p.decode.URL(), "/inference/v1/generate", "", body)
	want := `{"request_id":"generate-tokens-body-id","model":"tiny","created":0,"usage":{"prompt_tokens":20,"total_tokens":23,"completion_tokens":3,"completion_tokens_details":null},` +
		`"prompt_logprobs":null,"prompt_token_id_logprobs":null,"prompt_token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20],"mm_placeholders":null,"metrics":null,` +
		`"kv_transfer_params":null,"ec_transfer_params":null,"output_mode":"tokens","choices":[{"index":0,"finish_reason":"length","stop_reason":null,"token_ids":[501,502,503],` +
		`"routed_experts":null,"sampling_mask":null,"weight_versions":null,"logprobs":null}]}` + "\n"
	if got := created.ReplaceAllString(string(out), `"created":0`); got != want {
		t.Errorf("whole answer:\n got %s\nwant %s", got, want)
	}
	body = with(with(body, "stream", true), "stream_options", map[string]any{"include_usage": true})
	resp, out := p.postPath(t, p.decode.URL(), "/inference/v1/generate", "hdr-id", body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %q %s", resp.StatusCode, ct, out)
	}
	evs := sse(t, bytes.NewReader(out))
	choice := func(finish string, tok int) string {
		return fmt.Sprintf(`"output_mode":"tokens","choices":[{"index":0,"finish_reason":%s,"stop_reason":null,"token_ids":[%d],"routed_experts":null,"sampling_mask":null,"weight_versions":null,"logprobs":null}]}`, finish, tok)
	}
	wantEvs := []string{
		`{"request_id":"generate-tokens-hdr-id","usage":null,"prompt_token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20],` + choice("null", 501),
		`{"request_id":"generate-tokens-hdr-id","usage":null,` + choice("null", 502),
		`{"request_id":"generate-tokens-hdr-id","usage":null,` + choice(`"length"`, 503),
		`{"request_id":"generate-tokens-hdr-id","usage":{"prompt_tokens":20,"total_tokens":23,"completion_tokens":3},"output_mode":"tokens","choices":[]}`,
		`[DONE]`,
	}
	if !slices.Equal(evs, wantEvs) {
		t.Errorf("stream events:\n got %q\nwant %q", evs, wantEvs)
	}
}

// TestTokensOnlyRefusals: what a tokens-only engine refuses, and what an
// engine that is not tokens-only answers on /inference/v1/generate.
func TestTokensOnlyRefusals(t *testing.T) {
	p := tokensOnlyPair(t, server.ConnPull, nil)
	errBody := func(code int, param, msg string) string {
		pj := "null"
		if param != "" {
			pj = `"` + param + `"`
		}
		typ := "invalid_request_error"
		b, _ := json.Marshal(msg)
		return fmt.Sprintf(`{"error":{"message":%s,"type":"%s","param":%s,"code":%d}}`, b, typ, pj, code) + "\n"
	}
	const noTok = "Tokenizer not available when `skip_tokenizer_init=True`: this engine runs tokens-only and loads no tokenizer; send token ids to POST /inference/v1/generate (a render server's /v1/chat/completions/render makes them from a chat)."
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		code       int
		param, msg string
	}{
		{"stop string", "/inference/v1/generate", genReq(map[string]any{"max_tokens": 4, "stop": "\n"}), 400, "sampling_params.stop",
			"stop strings are not supported on a --tokens-only server because detokenization is disabled. Check stop strings on the coordinator, or use stop_token_ids."},
		{"stop strings", "/inference/v1/generate", genReq(map[string]any{"max_tokens": 4, "stop": []string{"a", "b"}}), 400, "sampling_params.stop",
			"stop strings are not supported on a --tokens-only server because detokenization is disabled. Check stop strings on the coordinator, or use stop_token_ids."},
		{"output_mode text", "/inference/v1/generate", with(genReq(map[string]any{"max_tokens": 4}), "output_mode", "text"), 400, "output_mode",
			`output_mode="text" requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.`},
		{"no sampling_params", "/inference/v1/generate", map[string]any{"token_ids": promptIDs}, 400, "sampling_params",
			`sampling_params is required; send at least {"max_tokens": N}.`},
		{"no token_ids", "/inference/v1/generate", map[string]any{"sampling_params": map[string]any{}}, 400, "token_ids",
			"token_ids is required; send the prompt's token ids (a render server's /render makes them)."},
		{"negative token", "/inference/v1/generate", with(genReq(map[string]any{}), "token_ids", []int{1, -2}), 400, "token_ids",
			"token_ids[1] is token id -2, outside the vocabulary [0, 32000)."},
		{"n", "/inference/v1/generate", genReq(map[string]any{"n": 2}), 400, "sampling_params.n",
			"sampling_params.n must be 1, got 2: this engine returns one choice per request."},
		{"chat", "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}}, 400, "", noTok},
		{"text prompt", "/v1/completions", map[string]any{"prompt": "hello there"}, 400, "prompt", noTok},
	} {
		resp, out := p.postPath(t, p.decode.URL(), tc.path, "", tc.body)
		if want := errBody(tc.code, tc.param, tc.msg); resp.StatusCode != tc.code || string(out) != want {
			t.Errorf("%s: %d %s\nwant %d %s", tc.name, resp.StatusCode, out, tc.code, want)
		}
	}
	// A token-id completion is served, its text empty: no tokenizer.
	c := p.complete(t, p.decode.URL(), "", map[string]any{"prompt": promptIDs, "max_tokens": 3})
	if c.Choices[0].Text != "" || c.Usage.CompletionTokens != 3 {
		t.Errorf("token-id completion on a tokens-only engine: %+v", c)
	}
	if st := p.decode.Stats(); st.RequestsDone != 1 {
		t.Errorf("refusals changed state: %+v", st)
	}

	q := newPair(t, server.ConnPull, opts{})
	resp, out := q.postPath(t, q.decode.URL(), "/inference/v1/generate", "", genReq(map[string]any{"max_tokens": 2}))
	want := errBody(403, "", "Scale-out endpoints are disabled: POST /inference/v1/generate is served only by a tokens-only engine (-tokens-only, server.Config.TokensOnly), as vLLM serves it with --tokens-only or --enable-scale-out.")
	if resp.StatusCode != 403 || string(out) != want {
		t.Errorf("generate on an engine not tokens-only: %d %s", resp.StatusCode, out)
	}
}
