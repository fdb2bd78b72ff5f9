package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded is one POST /v1/completions a fake engine received.
type recorded struct {
	raw    []byte
	body   map[string]any
	header http.Header
}

// fake is an engine speaking just enough of the engine API; it records what it gets.
type fake struct {
	t      *testing.T
	srv    *httptest.Server
	info   KVTransferInfo
	health atomic.Int32 // status of GET /health; 0 = 200
	// hangHealth makes GET /health answer nothing until its request ends.
	hangHealth atomic.Bool
	// geometry, when set, is the kv_geometry GET /kv_transfer_info reports
	// (an engine restarted with another model changes it).
	geometry atomic.Pointer[KVGeometry]

	// complete answers POST /v1/completions; default: answerJSON.
	complete func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded)

	mu        sync.Mutex
	reqs      []recorded
	cancelled []string // X-Request-Id of the requests whose context ended before the answer
	arrived   chan recorded
}

func newFake(t *testing.T, role, connector string, complete func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded)) *fake {
	t.Helper()
	return newFakeOn(t, nil, role, connector, complete)
}

// newFakeOn is newFake serving on ln (nil: a new listener).
func newFakeOn(t *testing.T, ln net.Listener, role, connector string, complete func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded)) *fake {
	t.Helper()
	f := &fake{t: t, complete: complete, arrived: make(chan recorded, 64)}
	f.info = KVTransferInfo{Role: role, Connector: connector, Model: "toy", SideChannelHost: "10.1.2.3", TPSize: 2, PPSize: 1, BlockSize: 16}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if f.hangHealth.Load() {
			<-r.Context().Done()
			return
		}
		if s := f.health.Load(); s != 0 {
			w.WriteHeader(int(s))
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /kv_transfer_info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		info := f.info
		info.KVGeometry = f.geometry.Load()
		_ = json.NewEncoder(w).Encode(info)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"toy","object":"model","owned_by":"`+f.info.EngineID+`"}]}`)
	})
	completions := func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		rec := recorded{raw: raw, header: r.Header.Clone()}
		if err := json.Unmarshal(raw, &rec.body); err != nil {
			t.Errorf("%s engine got a body that is not JSON: %q", role, raw)
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		f.mu.Unlock()
		f.arrived <- rec
		c := f.complete
		if c == nil {
			c = answerJSON
		}
		c(f, w, r, rec)
	}
	mux.HandleFunc("POST /v1/completions", completions)
	mux.HandleFunc("POST "+chatPath, completions)
	f.srv = httptest.NewUnstartedServer(mux)
	if ln != nil {
		f.srv.Listener.Close()
		f.srv.Listener = ln
	}
	// Before Start: the handlers read f.info, and a proxy may already be polling ln.
	f.info.EngineID = role + "-" + f.srv.Listener.Addr().String()
	f.info.SideChannelPort = 5600 + len("http://"+f.srv.Listener.Addr().String())%100
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fake) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancelled...)
}

// waitCancelled blocks the handler until the request's context ends or 5 s pass, and
// records a cancellation.
func (f *fake) waitCancelled(r *http.Request) bool {
	select {
	case <-r.Context().Done():
		f.mu.Lock()
		f.cancelled = append(f.cancelled, r.Header.Get("X-Request-Id"))
		f.mu.Unlock()
		return true
	case <-time.After(5 * time.Second):
		f.t.Errorf("engine %s: request %s never cancelled", f.info.EngineID, r.Header.Get("X-Request-Id"))
		return false
	}
}

// transferID is a push leg's kv_transfer_params.transfer_id.
func transferID(rec recorded) any {
	kv, _ := rec.body["kv_transfer_params"].(map[string]any)
	return kv["transfer_id"]
}

// pushPartner waits, in a push prefill engine's handler, for the leg's decode partner (the
// decode leg with its transfer_id) to reach one of decodes, and returns that engine and the
// partner's request: a prefill engine answers only once decode registered. When the proxy
// cancels the leg first it records the cancel and returns nil. The wait is bounded (5 s, a
// test error) only against a hang.
func (f *fake) pushPartner(r *http.Request, rec recorded, decodes ...*fake) (*fake, recorded) {
	tid := transferID(rec)
	deadline := time.After(5 * time.Second)
	for {
		for _, d := range decodes {
			for _, dr := range d.requests() {
				if transferID(dr) == tid {
					return d, dr
				}
			}
		}
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			f.cancelled = append(f.cancelled, r.Header.Get("X-Request-Id"))
			f.mu.Unlock()
			return nil, recorded{}
		case <-deadline:
			f.t.Errorf("engine %s: the decode leg of transfer %v never came", f.info.EngineID, tid)
			return nil, recorded{}
		case <-time.After(time.Millisecond):
		}
	}
}

func (f *fake) nextRequest(t *testing.T) recorded {
	t.Helper()
	select {
	case rec := <-f.arrived:
		return rec
	case <-time.After(5 * time.Second):
		t.Fatalf("engine %s got no request", f.info.EngineID)
		return recorded{}
	}
}

// prefillKV is what a pull prefill fake answers in kv_transfer_params.
func prefillKV(f *fake, rec recorded) map[string]any {
	return map[string]any{
		"do_remote_prefill": true,
		"do_remote_decode":  false,
		"remote_block_ids":  []any{float64(3), float64(4), float64(5)},
		"remote_engine_id":  f.info.EngineID,
		"remote_request_id": rec.header.Get("X-Request-Id") + "-abcd1234",
		"remote_host":       f.info.SideChannelHost,
		"remote_port":       float64(f.info.SideChannelPort),
		"tp_size":           float64(f.info.TPSize),
	}
}

// answerJSON answers like a vLLM engine: prefill with kv_transfer_params, decode with text.
func answerJSON(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
	var kv any
	text := " world"
	if f.info.Role == "prefill" {
		text = " w"
		if f.info.Connector == "pull" {
			kv = prefillKV(f, rec)
		}
	}
	answer := map[string]any{
		"id": "cmpl-" + rec.header.Get("X-Request-Id"), "object": "text_completion", "created": 1700000000, "model": "toy",
		"choices":            []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": "length"}},
		"usage":              map[string]any{"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
		"kv_transfer_params": kv,
	}
	if rec.body["return_token_ids"] == true { // a chat's prefill leg on pull
		answer["prompt_token_ids"] = []any{float64(1), float64(2)}
	}
	writeJSON(w, http.StatusOK, answer)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func answer500(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
	writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"message": "engine exploded", "type": "InternalServerError", "code": 500}})
}

// sseChunks is a decode stream as vLLM writes it.
var sseChunks = []string{
	`data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"toy","choices":[{"index":0,"text":" wor","logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n",
	`data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"toy","choices":[{"index":0,"text":"ld","logprobs":null,"finish_reason":"length"}],"usage":null}` + "\n\n",
	`data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"toy","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}` + "\n\n",
	"data: [DONE]\n\n",
}

func streamSSE(w http.ResponseWriter, between func(i int)) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for i, c := range sseChunks {
		if i > 0 && between != nil {
			between(i)
		}
		_, _ = io.WriteString(w, c)
		w.(http.Flusher).Flush()
	}
}

// harness is a proxy in front of fakes.
type harness struct {
	p     *Proxy
	front *httptest.Server
}

func newHarness(t *testing.T, cfg Config, prefill, decode []*fake) *harness {
	t.Helper()
	for _, f := range prefill {
		cfg.Prefill = append(cfg.Prefill, f.srv.URL)
	}
	for _, f := range decode {
		cfg.Decode = append(cfg.Decode, f.srv.URL)
	}
	return startHarness(t, cfg)
}

// startHarness starts a proxy of cfg (health checks every 50 ms unless it
// says otherwise) behind a test server; both close with the test.
func startHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 50 * time.Millisecond
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return &harness{p: p, front: front}
}

func (h *harness) post(t *testing.T, ctx context.Context, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.front.URL+"/v1/completions", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return m
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
