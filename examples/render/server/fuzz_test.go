package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzEndpoints sends arbitrary bodies to both endpoints: every answer is
// 200 or a 4xx whose body is vLLM's error JSON with the same code; nothing
// panics.
func FuzzEndpoints(f *testing.F) {
	s, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Add(true, weatherReq)
	f.Add(false, `{"generate_response":{"request_id":"r","choices":[{"index":0,"token_ids":[9906,100280,100281]}]},"chat_request":{"messages":[]}}`)
	f.Add(false, `{"stream":true,"prompt_token_ids":[1],"generate_chunk":{"request_id":"r","choices":[{"index":0,"token_ids":[100279,9906],"finish_reason":"stop"}]},"stream_state":{"output_token_ids":[1],"output_chunk_lens":[1]},"chat_request":{"messages":[]}}`)
	f.Fuzz(func(t *testing.T, render bool, body string) {
		path := "/v1/chat/completions/derender"
		if render {
			path = "/v1/chat/completions/render"
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK {
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("200 with a body that is not JSON: %q", rec.Body.String())
			}
			return
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != rec.Code || e.Error.Message == "" || rec.Code >= 500 {
			t.Fatalf("answer %d %q for %q", rec.Code, rec.Body.String(), body)
		}
	})
}
