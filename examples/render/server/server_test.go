package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/examples/render/chat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestServer(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

const weatherReq = `{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"}],` +
	`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"max_tokens":64,"temperature":0.5,"future_field":{"kept":true}}`

func TestRenderAnswersGenerateRequest(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	code, body := post(t, ts.URL+"/v1/chat/completions/render", weatherReq)
	require.Equal(t, 200, code, body)
	var gen GenerateRequest
	require.NoError(t, json.Unmarshal([]byte(body), &gen))
	var req chat.Request
	require.NoError(t, json.Unmarshal([]byte(weatherReq), &req))
	want, err := s.Pipeline().Render(&req)
	require.NoError(t, err)
	require.Equal(t, want, gen.TokenIDs)
	require.True(t, strings.HasPrefix(gen.RequestID, "chatcmpl-"))
	require.Equal(t, 64, gen.SamplingParams.MaxTokens)
	require.Equal(t, 0.5, *gen.SamplingParams.Temperature)
	require.Equal(t, "tokens", gen.OutputMode)
	require.Equal(t, map[string]any{}, gen.ReasoningParserKwargs.ChatTemplateKwargs)
	require.Nil(t, gen.ReasoningEnded)
	require.Len(t, gen.ParseContext.Tools, 1)
	require.Contains(t, body, `"reasoning_ended":null`)
}

func TestDerenderWithoutChatRequestIs400(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	code, body := post(t, ts.URL+"/v1/chat/completions/derender", `{"generate_response":{"request_id":"r","choices":[{"index":0,"token_ids":[9906]}]}}`)
	require.Equal(t, 400, code)
	require.Equal(t, `{"error":{"code":400,"message":"chat_request is required when a tool or reasoning parser is configured because plain detokenization would leak raw parser markup into content.","param":null,"type":"BadRequestError"}}`+"\n", body)
	require.Equal(t, 1.0, counterValue(t, s, "gonixl_render_bad_requests_total", "no_chat_request"))
}

func TestDerenderSplitsReasoningAndToolCall(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	out := s.Pipeline().Tokenize("<think>\nParis is in France.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>")
	reqJSON, _ := json.Marshal(map[string]any{"generate_response": map[string]any{"request_id": "chatcmpl-1", "choices": []any{map[string]any{"index": 0, "token_ids": out}}},
		"prompt_tokens": 12, "chat_request": json.RawMessage(weatherReq)})
	code, body := post(t, ts.URL+"/v1/chat/completions/derender", string(reqJSON))
	require.Equal(t, 200, code, body)
	var resp ChatCompletionResponse
	require.NoError(t, json.Unmarshal([]byte(body), &resp))
	require.Equal(t, "chatcmpl-1", resp.ID)
	require.Len(t, resp.Choices, 1)
	m := resp.Choices[0].Message
	require.Equal(t, "\nParis is in France.\n", *m.Reasoning)
	require.Equal(t, "\n\n", *m.Content) // the text before <tool_call>, as vLLM's hermes parser keeps it
	require.Len(t, m.ToolCalls, 1)
	require.Equal(t, `{"city": "Paris"}`, m.ToolCalls[0].Function.Arguments)
	require.Equal(t, "tool_calls", *resp.Choices[0].FinishReason)
	require.Equal(t, Usage{PromptTokens: 12, CompletionTokens: len(out), TotalTokens: 12 + len(out)}, resp.Usage)
}

func TestStreamingDerenderStatelessMatchesLocal(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	p, err := chat.New(chat.Config{})
	require.NoError(t, err)
	var req chat.Request
	require.NoError(t, json.Unmarshal([]byte(weatherReq), &req))
	prompt, err := p.Render(&req)
	require.NoError(t, err)
	out := p.Tokenize("<think>\nLook it up: é ü 東京.\n</think>\n\nChecking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	remote := (&Client{BaseURL: ts.URL}).NewStream(&req, prompt)
	local := (&Client{BaseURL: ts.URL, Pipeline: p}).NewStream(&req, prompt)
	ctx := context.Background()
	var gotR, gotL chat.Delta
	for i := 0; i < len(out); i += 2 {
		j := min(i+2, len(out))
		finish := ""
		if j == len(out) {
			finish = "stop"
		}
		dr, err := remote.Next(ctx, out[i:j], finish)
		require.NoError(t, err)
		dl, err := local.Next(ctx, out[i:j], finish)
		require.NoError(t, err)
		for k := range dr.ToolCalls {
			dr.ToolCalls[k].ID, dl.ToolCalls[k].ID = "", ""
		}
		require.Equal(t, dl, dr, "chunk at %d", i)
		gotR = merge(gotR, dr)
		gotL = merge(gotL, dl)
	}
	require.Equal(t, "\nLook it up: é ü 東京.\n", gotR.Reasoning)
	require.Equal(t, "\n\nChecking.", gotR.Content)
	require.True(t, remote.ToolsStreamed())
	require.True(t, local.ToolsStreamed())
}

func merge(a, b chat.Delta) chat.Delta {
	a.Content += b.Content
	a.Reasoning += b.Reasoning
	a.ToolCalls = append(a.ToolCalls, b.ToolCalls...)
	return a
}

func TestBadRequestsAnswerAndCount(t *testing.T) {
	s, ts := newTestServer(t, Config{ServedModelName: "qwen"})
	for _, tc := range []struct{ path, body, reason, want string }{
		{"/v1/chat/completions/render", `{"messages":`, "json", "request body is not valid JSON for this endpoint: unexpected end of JSON input"},
		{"/v1/chat/completions/render", `{"messages":[]}`, "render", "messages must not be empty"},
		{"/v1/chat/completions/render", `{"messages":[{"role":"robot","content":"x"}]}`, "render", `messages[0].role "robot" is not one of system, user, assistant, tool`},
		{"/v1/chat/completions/render", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "model", "The model `m` does not exist. Valid aliases: qwen."},
		{"/v1/chat/completions/derender", `{"stream":true,"generate_chunk":{"request_id":"r","choices":[{"index":0,"token_ids":[1]}]},"chat_request":{"messages":[]}}`, "no_prompt_ids", errNeedPromptIDs},
		{"/v1/chat/completions/derender", `{"stream":true,"prompt_token_ids":[1],"generate_chunk":{"request_id":"r","choices":[{"index":0,"token_ids":[1]}]},"chat_request":{"messages":[],"stop":"x"}}`, "stream_stop", errStreamStop},
		{"/v1/chat/completions/derender", `{"stream":true,"prompt_token_ids":[1],"generate_chunk":{"request_id":"r","choices":[{"index":0,"token_ids":[1]}]},"stream_state":{"output_token_ids":[1,2],"output_chunk_lens":[1]},"chat_request":{"messages":[]}}`, "stream_state", "output_chunk_lens must sum to len(output_token_ids) (got sum=1, len(output_token_ids)=2)"},
		{"/v1/chat/completions/derender", `{"generate_response":{"request_id":"r","choices":[{"index":0,"token_ids":[99999999]}]},"chat_request":{"messages":[]}}`, "tokens", "token id 99999999 is outside the vocabulary (size 100285)"},
	} {
		code, body := post(t, ts.URL+tc.path, tc.body)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		require.Equal(t, tc.want, e.Error.Message)
		require.Equal(t, code, e.Error.Code)
		require.Contains(t, []int{400, 404}, code)
		require.GreaterOrEqual(t, counterValue(t, s, "gonixl_render_bad_requests_total", tc.reason), 1.0, tc.reason)
	}
}

func counterValue(t *testing.T, s *Server, name, reason string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestHealthAndMetrics(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	resp, err := http.Get(ts.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	code, _ := post(t, ts.URL+"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, code)
	resp, err = http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), "gonixl_render_renders_total 1\n")
}
