package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// TestErrorBodies asserts the exact body of each request error: OpenAI's
// shape, the field in param, and a message that says what to do.
func TestErrorBodies(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","max_tokens":"8"}`, 400,
			`{"error":{"message":"max_tokens must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","max_tokens":1.5}`, 400,
			`{"error":{"message":"max_tokens must be an integer, got 1.5.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","stream":"yes"}`, 400,
			`{"error":{"message":"stream must be true or false, got a string; write it without quotes.","type":"invalid_request_error","param":"stream","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","stream_options":{"include_usage":1}}`, 400,
			`{"error":{"message":"stream_options.include_usage must be true or false, got a number.","type":"invalid_request_error","param":"stream_options.include_usage","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"remote_port":"5600"}}`, 400,
			`{"error":{"message":"kv_transfer_params.remote_port must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"kv_transfer_params.remote_port","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","n":2}`, 400,
			`{"error":{"message":"n must be 1, got 2: this engine returns one choice per request; send 2 requests instead.","type":"invalid_request_error","param":"n","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","n":0}`, 400,
			`{"error":{"message":"n must be at least 1, got 0.","type":"invalid_request_error","param":"n","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","max_tokens":0}`, 400,
			`{"error":{"message":"max_tokens must be at least 1, got 0.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"POST", "/v1/completions", `{"model":`, 400,
			`{"error":{"message":"The request body is not valid JSON (it ends early); send a JSON object.","type":"invalid_request_error","param":null,"code":400}}`},
		{"POST", "/v1/completions", `{"model":}`, 400,
			`{"error":{"message":"The request body is not valid JSON (invalid character '}' looking for beginning of value, at byte 10); send a JSON object.","type":"invalid_request_error","param":null,"code":400}}`},
		{"POST", "/v1/completions", `[1]`, 400,
			`{"error":{"message":"The request body must be a JSON object, got an array.","type":"invalid_request_error","param":null,"code":400}}`},
		{"POST", "/v1/completions", `{"model":"other","prompt":"a"}`, 404,
			"{\"error\":{\"message\":\"The model `other` does not exist; this engine serves `tiny` (GET /v1/models).\",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":404}}"},
		{"POST", "/v1/completions", `{"model":"tiny"}`, 400,
			`{"error":{"message":"prompt is required; send a string, a list of token ids, or a list holding one of either.","type":"invalid_request_error","param":"prompt","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":["a","b"]}`, 400,
			`{"error":{"message":"prompt holds 2 prompts; this engine takes one prompt per request: send one request each.","type":"invalid_request_error","param":"prompt","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":[1,-2]}`, 400,
			`{"error":{"message":"prompt[1] is token id -2, outside the vocabulary [0, 32000).","type":"invalid_request_error","param":"prompt","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_prefill":"yes"}}`, 400,
			`{"error":{"message":"kv_transfer_params.do_remote_prefill must be true or false, got a string; write it without quotes.","type":"invalid_request_error","param":"kv_transfer_params.do_remote_prefill","code":400}}`},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_decode":true}}`, 400,
			`{"error":{"message":"kv_transfer_params.do_remote_decode was sent to a decode (kv_consumer) engine; send the prefill leg to a prefill engine.","type":"invalid_request_error","param":"kv_transfer_params.do_remote_decode","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny"}`, 400,
			`{"error":{"message":"messages is required; send a list of {\"role\": \"user\", \"content\": \"...\"} objects.","type":"invalid_request_error","param":"messages","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]}`, 400,
			`{"error":{"message":"messages[1].role is \"robot\"; use system, developer, user, assistant or tool.","type":"invalid_request_error","param":"messages[1].role","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400,
			`{"error":{"message":"messages[0].content[0] is not a text part; this engine reads only {\"type\": \"text\", \"text\": \"...\"} parts.","type":"invalid_request_error","param":"messages[0].content[0]","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"}],"n":3}`, 400,
			`{"error":{"message":"n must be 1, got 3: this engine returns one choice per request; send 3 requests instead.","type":"invalid_request_error","param":"n","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"}],"max_completion_tokens":"4"}`, 400,
			`{"error":{"message":"max_completion_tokens must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"max_completion_tokens","code":400}}`},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"}],"prompt_token_ids":[40000]}`, 400,
			`{"error":{"message":"prompt_token_ids[0] is token id 40000, outside the vocabulary [0, 32000).","type":"invalid_request_error","param":"prompt_token_ids","code":400}}`},
		{"GET", "/v1/chat/completions", ``, 405,
			`{"error":{"message":"GET /v1/chat/completions is not supported; use POST.","type":"invalid_request_error","param":null,"code":405}}`},
		{"POST", "/v1/nothing", `{}`, 404,
			`{"error":{"message":"No route POST /v1/nothing on this engine; it serves POST /v1/completions, POST /v1/chat/completions and GET /v1/models.","type":"invalid_request_error","param":null,"code":404}}`},
	} {
		hr, _ := http.NewRequest(tc.method, p.decode.URL()+tc.path, strings.NewReader(tc.body))
		resp, err := p.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || string(b) != tc.want+"\n" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s:\n got %d %s\nwant %d %s", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.code, tc.want)
		}
	}
	idle(t, p)
}
