package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// TestLoopErrorBodies asserts the exact body of the errors the engine loop
// finds, each naming in param the request field at fault: a prompt or a
// token limit the KV cache cannot hold (in the field the client used), and
// kv_transfer_params a connector refuses, by their key.
func TestLoopErrorBodies(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{decodeBlocks: 4}) // 4 blocks of 16 tokens
	info := p.prefill.Info()
	long := make([]string, 70)
	for i := range long {
		long[i] = "1"
	}
	chatToks := len(server.Tokenize(server.ChatPrompt([]server.ChatMessage{{Role: "user", Content: "a"}})))
	kv := func(tp, port int) string {
		return fmt.Sprintf(`{"do_remote_prefill":true,"remote_engine_id":%q,"remote_host":%q,"remote_port":%d,"remote_request_id":"r1","remote_block_ids":[0],"tp_size":%d}`,
			info.EngineID, info.SideChannelHost, port, tp)
	}
	for _, tc := range []struct {
		path, body string
		want       string
	}{
		{"/v1/completions", `{"model":"tiny","prompt":[1],"max_tokens":100}`,
			`{"error":{"message":"max_tokens is 100: the request needs 7 KV blocks of 16 tokens (prompt 1 + max_tokens 100) and the engine has 4; ask for at most 63 tokens.","type":"invalid_request_error","param":"max_tokens","code":400}}`},
		{"/v1/completions", `{"model":"tiny","prompt":[` + strings.Join(long, ",") + `],"max_tokens":1}`,
			`{"error":{"message":"prompt is 70 tokens, 5 KV blocks of 16 tokens, and the engine has 4 blocks (64 tokens in all); send a shorter prompt.","type":"invalid_request_error","param":"prompt","code":400}}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"}],"max_completion_tokens":100}`,
			fmt.Sprintf(`{"error":{"message":"max_completion_tokens is 100: the request needs %d KV blocks of 16 tokens (prompt %d + max_completion_tokens 100) and the engine has 4; ask for at most %d tokens.","type":"invalid_request_error","param":"max_completion_tokens","code":400}}`,
				(chatToks+100+15)/16, chatToks, 64-chatToks)},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"a"}],"prompt_token_ids":[` + strings.Join(long, ",") + `]}`,
			`{"error":{"message":"prompt_token_ids is 70 tokens, 5 KV blocks of 16 tokens, and the engine has 4 blocks (64 tokens in all); send a shorter prompt.","type":"invalid_request_error","param":"prompt_token_ids","code":400}}`},
		// Refused as the request is read.
		{"/v1/completions", `{"model":"tiny","prompt":[1],"max_tokens":1,"kv_transfer_params":` + kv(2, 0) + `}`,
			`{"error":{"message":"kv_transfer_params.remote_port is 0, want 1..65535; pass on the prefill answer's kv_transfer_params unchanged.","type":"invalid_request_error","param":"kv_transfer_params.remote_port","code":400}}`},
		// Refused by the connector once it has the prefill engine's TP size.
		{"/v1/completions", `{"model":"tiny","prompt":[1],"max_tokens":1,"kv_transfer_params":` + kv(1, info.SideChannelPort) + `}`,
			`{"error":{"message":"kv_transfer_params.tp_size is 1, engine \"prefill\" has TP size 2; pass on the prefill answer's kv_transfer_params unchanged.","type":"invalid_request_error","param":"kv_transfer_params.tp_size","code":400}}`},
	} {
		hr, _ := http.NewRequest("POST", p.decode.URL()+tc.path, strings.NewReader(tc.body))
		resp, err := p.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || string(b) != tc.want+"\n" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s:\n got %d %s\nwant 400 %s", tc.path, tc.body, resp.StatusCode, b, tc.want)
		}
	}
	idle(t, p)
}

// A push decode leg missing one of the prefill engine's keys names that key.
func TestPushDecodeMissingKey(t *testing.T) {
	p := newPair(t, server.ConnPush, opts{})
	body := `{"model":"tiny","prompt":[1],"kv_transfer_params":{"do_remote_prefill":true,"transfer_mode":"push","remote_engine_id":"prefill","remote_host":"127.0.0.1","tp_size":2}}`
	resp, err := p.client.Post(p.decode.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"error":{"message":"kv_transfer_params: push decode needs remote_engine_id, remote_host, remote_port and tp_size (the prefill engine's GET /kv_transfer_info), got {\"do_remote_prefill\":true,\"transfer_mode\":\"push\",\"remote_engine_id\":\"prefill\",\"remote_host\":\"127.0.0.1\",\"tp_size\":2}.","type":"invalid_request_error","param":"kv_transfer_params.remote_port","code":400}}` + "\n"
	if resp.StatusCode != 400 || string(b) != want {
		t.Errorf("got %d %s\nwant 400 %s", resp.StatusCode, b, want)
	}
	idle(t, p)
}
