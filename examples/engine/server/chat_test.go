package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

var chatMessages = []server.ChatMessage{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: "Hello there"}}

func TestChatPrompt(t *testing.T) {
	want := "<|system|>\nAnswer briefly.\n<|user|>\nHello there\n<|assistant|>\n"
	if got := server.ChatPrompt(chatMessages); got != want {
		t.Errorf("ChatPrompt = %q, want %q", got, want)
	}
}

func postPath(t *testing.T, p *pair, url, path, reqID string, body map[string]any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	hr, _ := http.NewRequest("POST", url+path, bytes.NewReader(b))
	hr.Header.Set("X-Request-Id", reqID)
	resp, err := p.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp, out.Bytes()
}

// TestChat checks that a chat answers what /v1/completions answers for the
// templated prompt, whole and streamed, locally and as a disaggregated decode
// given the prefill's prompt_token_ids.
func TestChat(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	prompt := server.ChatPrompt(chatMessages)
	want := p.complete(t, p.decode.URL(), "", req(prompt, 4)).Choices[0].Text
	chat := map[string]any{"model": "tiny", "messages": chatMessages, "max_tokens": 4}

	resp, b := postPath(t, p, p.decode.URL(), "/v1/chat/completions", "c-1", chat)
	var c struct {
		ID, Object string
		Choices    []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
		PromptTokenIDs []int `json:"prompt_token_ids"`
	}
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if c.ID != "chatcmpl-c-1" || c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" ||
		c.Choices[0].Message.Content != want || c.Choices[0].FinishReason != "length" || c.Usage.PromptTokens != len(strings.Fields(prompt)) ||
		c.PromptTokenIDs != nil || strings.Contains(string(b), "kv_transfer_params") {
		t.Errorf("chat answer %s, want content %q", b, want)
	}

	// The proxy's hand-off: prefill returns the token ids, decode takes them.
	pre := with(with(chat, "kv_transfer_params", map[string]any{"do_remote_decode": true}), "return_token_ids", true)
	resp, b = postPath(t, p, p.prefill.URL(), "/v1/chat/completions", "c-2", pre)
	var pa struct {
		PromptTokenIDs []int          `json:"prompt_token_ids"`
		KV             map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(b, &pa); err != nil || resp.StatusCode != 200 || len(pa.PromptTokenIDs) != len(server.Tokenize(prompt)) || pa.KV == nil {
		t.Fatalf("prefill: %d %s", resp.StatusCode, b)
	}
	dec := with(with(with(with(chat, "messages", []server.ChatMessage{{Role: "user", Content: "ignored: decode takes the ids"}}),
		"kv_transfer_params", pa.KV), "prompt_token_ids", pa.PromptTokenIDs), "stream", true)
	resp, b = postPath(t, p, p.decode.URL(), "/v1/chat/completions", "c-2", dec)
	evs := sse(t, bytes.NewReader(b))
	if resp.StatusCode != 200 || len(evs) != 1+4+1 {
		t.Fatalf("%d events: %q", len(evs), evs)
	}
	// Created varies: compare the first chunk without it.
	first := evs[0][strings.Index(evs[0], `"model"`):]
	if !strings.HasPrefix(evs[0], `{"id":"chatcmpl-c-2","object":"chat.completion.chunk","created":`) ||
		first != `"model":"tiny","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` {
		t.Errorf("first chunk %s", evs[0])
	}
	var text string
	for i, ev := range evs[1:5] {
		var ch struct {
			Choices []struct {
				Delta        map[string]string
				FinishReason *string `json:"finish_reason"`
			}
		}
		json.Unmarshal([]byte(ev), &ch)
		if len(ch.Choices) != 1 || len(ch.Choices[0].Delta) != 1 || (i == 3) != (ch.Choices[0].FinishReason != nil) {
			t.Errorf("chunk %d: %s", i, ev)
		}
		text += ch.Choices[0].Delta["content"]
	}
	if text != want {
		t.Errorf("streamed %q, want %q", text, want)
	}
	if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified == 0 {
		t.Errorf("decode stats %+v", st)
	}
	idle(t, p)
}
