package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	renderserver "github.com/gonixl/gonixl/examples/render/server"
)

// generateEngine is an engine that serves /inference/v1/generate with a
// fixed answer (a prefill's JSON, or a decode's stream taken from body).
func generateEngine(t testing.TB, role string, answer func(w http.ResponseWriter)) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /kv_transfer_info", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(KVTransferInfo{EngineID: role + "-fuzz", Role: role, Connector: "pull", Model: "toy",
			SideChannelHost: "127.0.0.1", SideChannelPort: 5600, TPSize: 1, PPSize: 1, BlockSize: 16})
	})
	mux.HandleFunc("POST "+generatePath, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(w)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// FuzzGenerateStream: whatever decode's generate stream holds (events that
// are not JSON, error events, token ids the vocabulary lacks, no [DONE],
// CRLF lines), the proxy's chat stream through the render tier is a 200
// event stream that ends with exactly one "data: [DONE]", and nothing
// panics.
func FuzzGenerateStream(f *testing.F) {
	for _, seed := range []string{
		"data: {\"choices\":[{\"index\":0,\"token_ids\":[9906,0],\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"index\":0,\"token_ids\":[],\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n",
		"data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"token_ids\":[999999999]}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"token_ids\":[-5]}]}\r\n\r\n",
		"data: not json\n\n",
		"data: {\"choices\":[{\"token_ids\":[100279,40,100280]}]}\n\n",
		"",
		": comment\n\ndata: [DONE]\n\n",
	} {
		f.Add(seed)
	}
	var body atomic.Pointer[string]
	rs, err := renderserver.New(renderserver.Config{})
	if err != nil {
		f.Fatal(err)
	}
	render := httptest.NewServer(rs.Handler())
	defer render.Close()
	prefill := generateEngine(f, "prefill", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"request_id":"r","choices":[{"index":0,"token_ids":[9906],"finish_reason":"length"}],`+
			`"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"prefill-fuzz","remote_host":"127.0.0.1","remote_port":5600,"remote_block_ids":[1],"remote_request_id":"r","tp_size":1}}`)
	})
	decode := generateEngine(f, "decode", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, *body.Load())
	})
	p, err := New(Config{Prefill: []string{prefill.URL}, Decode: []string{decode.URL}, Render: []string{render.URL}, HealthInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()
	req := `{"model":"toy","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`
	f.Fuzz(func(t *testing.T, stream string) {
		body.Store(&stream)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		resp, err := front.Client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("the proxy's stream broke: %v (%q)", err, got)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, got)
		}
		if !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) || bytes.Count(got, []byte("data: [DONE]")) != 1 {
			t.Fatalf("the stream does not end with one [DONE]:\n%s", got)
		}
	})
}
