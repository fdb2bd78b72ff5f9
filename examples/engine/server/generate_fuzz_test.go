package server

import (
	"net/http"
	"testing"

	"github.com/gonixl/gonixl/connector"
)

// FuzzGenerateRequest feeds /inference/v1/generate bodies to the request
// parser: never a panic; an error names a status the engine answers with,
// a request has a prompt in the vocabulary and a token limit of at least 1.
func FuzzGenerateRequest(f *testing.F) {
	for _, seed := range []string{
		`{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}`,
		`{"token_ids":[1],"sampling_params":{"stop":["x"]},"stream":true,"stream_options":{"include_usage":true}}`,
		`{"token_ids":[5,6],"sampling_params":{"stop_token_ids":[6],"ignore_eos":true},"kv_transfer_params":{"do_remote_prefill":true}}`,
		`{"token_ids":[],"sampling_params":{}}`, `{"token_ids":"x"}`, `[]`, `{"output_mode":"derender","token_ids":[1],"sampling_params":{}}`,
		`{"token_ids":[1],"sampling_params":{"n":2,"max_tokens":-1}}`, `{"token_ids":[1],"sampling_params":null,"features":{}}`,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{cfg: Config{Role: RoleDecode, Connector: ConnPull, TokensOnly: true, VocabSize: 100, ServedModelName: "m", Clock: connector.SystemClock{}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, cf, a, e := s.generateRequest(body, "id", true)
		if e != nil {
			if e.code != http.StatusBadRequest && e.code != http.StatusNotFound {
				t.Fatalf("status %d: %s", e.code, e.msg)
			}
			return
		}
		if r == nil || cf == nil || a == nil || len(r.tokens) == 0 || r.maxTokens < 1 {
			t.Fatalf("request %+v", r)
		}
		for _, tok := range r.tokens {
			if tok < 0 || tok >= 100 {
				t.Fatalf("token %d outside the vocabulary", tok)
			}
		}
	})
}
