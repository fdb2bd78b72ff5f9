package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var tiny = server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 4, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}

type pair struct {
	prefill, decode *server.Server
	client          *http.Client
}

type opts struct {
	compute server.ComputeModel
	hook    func(string, int, descriptors.Layout, []int, []byte)
	inline  bool
	// decodeBlocks is decode's NumBlocks (default 256).
	decodeBlocks int
	// prefillTP and decodeTP override tiny's TP 2.
	prefillTP, decodeTP int
	prefillPP           int // prefill pipeline stages (push)
	fabric              func(*loopback.Fabric)
	policy              string
	bidir               bool // bidirectional KV (bidir_test.go)
	// prefillLayout and decodeLayout are each engine's KVLayout ("" HND).
	prefillLayout, decodeLayout string
	// connLog and statsInterval are both engines' ConnLogger and
	// StatsInterval.
	connLog       *zap.Logger
	statsInterval time.Duration
	// prefillModel and decodeModel override tiny for one engine.
	prefillModel, decodeModel *server.ModelSpec
	// configure, when set, changes each engine's Config last.
	configure func(role string, c *server.Config)
}

func newPair(t *testing.T, conn string, o opts) *pair {
	t.Helper()
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	if o.fabric != nil {
		o.fabric(fab)
	}
	newAgent := func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }
	mk := func(role string) *server.Server {
		cfg := server.Config{Role: role, Connector: conn, EngineID: role, Model: tiny, NumBlocks: 256,
			NewAgent: newAgent, Compute: o.compute, Logger: zaptest.NewLogger(t), Inline: o.inline, FailurePolicy: o.policy, Bidirectional: o.bidir,
			ConnLogger: o.connLog, StatsInterval: o.statsInterval}
		if role == server.RolePrefill {
			cfg.TPSize, cfg.PPSize, cfg.KVLayout = o.prefillTP, o.prefillPP, o.prefillLayout
			if o.prefillModel != nil {
				cfg.Model = *o.prefillModel
			}
		} else {
			cfg.TPSize, cfg.KVLayout = o.decodeTP, o.decodeLayout
			if o.decodeModel != nil {
				cfg.Model = *o.decodeModel
			}
		}
		if role == server.RolePrefill {
			cfg.KVHook = o.hook
		} else if o.decodeBlocks > 0 {
			cfg.NumBlocks = o.decodeBlocks
		}
		if o.configure != nil {
			o.configure(role, &cfg)
		}
		s, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	p := &pair{prefill: mk(server.RolePrefill), decode: mk(server.RoleDecode), client: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(func() {
		p.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []*server.Server{p.decode, p.prefill} {
			if err := s.Close(ctx); err != nil {
				t.Errorf("Close %s: %v", s.Info().Role, err)
			}
			if st := s.Stats(); st.BlocksInUse != 0 {
				t.Errorf("%s: %d blocks in use after Close", s.Info().Role, st.BlocksInUse)
			}
		}
		fab.Close()
	})
	return p
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	KVTransferParams map[string]any `json:"kv_transfer_params"`
}

func (p *pair) post(t *testing.T, url, reqID string, body map[string]any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func (p *pair) complete(t *testing.T, url, reqID string, body map[string]any) completion {
	t.Helper()
	resp, out := p.post(t, url, reqID, body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, out)
	}
	if got := resp.Header.Get("X-Request-Id"); reqID != "" && got != reqID {
		t.Errorf("X-Request-Id echoed %q, want %q", got, reqID)
	}
	var c completion
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return c
}

func req(prompt any, maxTokens int) map[string]any {
	return map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true}
}

func with(m map[string]any, k string, v any) map[string]any {
	n := map[string]any{}
	for a, b := range m {
		n[a] = b
	}
	n[k] = v
	return n
}

// disagg runs one request through both engines as the proxy does and
// returns decode's answer.
func (p *pair) disagg(t *testing.T, id string, body map[string]any) completion {
	t.Helper()
	if p.prefill.Info().Connector == server.ConnPull {
		pre := with(with(with(body, "max_tokens", 1), "stream", false), "kv_transfer_params", map[string]any{"do_remote_decode": true})
		pc := p.complete(t, p.prefill.URL(), id, pre)
		if pc.KVTransferParams == nil || pc.KVTransferParams["do_remote_prefill"] != true {
			t.Fatalf("prefill kv_transfer_params %v", pc.KVTransferParams)
		}
		return p.complete(t, p.decode.URL(), id, with(body, "kv_transfer_params", pc.KVTransferParams))
	}
	info := p.prefill.Info()
	tid := "xfer-" + id
	dec := with(body, "kv_transfer_params", map[string]any{"do_remote_prefill": true, "remote_engine_id": info.EngineID,
		"remote_host": info.SideChannelHost, "remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": info.PPSize,
		"transfer_mode": "push", "transfer_id": tid})
	var dc completion
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // decode first: it registers while prefill computes
		defer wg.Done()
		b, _ := json.Marshal(dec)
		r, _ := http.NewRequest("POST", p.decode.URL()+"/v1/completions", bytes.NewReader(b))
		r.Header.Set("X-Request-Id", id)
		resp, err := p.client.Do(r)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("decode: %d %s", resp.StatusCode, out)
		}
		json.Unmarshal(out, &dc)
	}()
	// Push's point: decode registered its blocks before prefill runs.
	eventually(t, "decode registered", func() bool { return p.decode.Stats().Waiting == 1 })
	pre := with(with(with(body, "max_tokens", 1), "stream", false), "kv_transfer_params",
		map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": tid})
	pc := p.complete(t, p.prefill.URL(), id, pre)
	if pc.KVTransferParams["transfer_mode"] != "push" {
		t.Errorf("prefill kv_transfer_params %v", pc.KVTransferParams)
	}
	wg.Wait()
	return dc
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	// The deadline only bounds a hang; a busy machine must not reach it.
	for deadline := time.Now().Add(time.Minute); !f(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func idle(t *testing.T, p *pair) {
	t.Helper()
	eventually(t, "every block free", func() bool {
		return p.prefill.Stats().BlocksInUse == 0 && p.decode.Stats().BlocksInUse == 0
	})
}

const prompt = "the quick brown fox jumps over the lazy dog and then some more words follow to fill more than one block of sixteen tokens ok"

func TestEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		conn   string
		inline bool
	}{{server.ConnPull, false}, {server.ConnPull, true}, {server.ConnPush, false}} {
		t.Run(fmt.Sprintf("%s/inline=%v", tc.conn, tc.inline), func(t *testing.T) {
			p := newPair(t, tc.conn, opts{inline: tc.inline})
			local := p.complete(t, p.decode.URL(), "local-1", req(prompt, 8))
			if n := len(strings.Fields(local.Choices[0].Text)); n != 8 {
				t.Fatalf("local text %q: %d words, want 8", local.Choices[0].Text, n)
			}
			ntok := len(strings.Fields(prompt))
			if u := local.Usage; u.PromptTokens != ntok || u.CompletionTokens != 8 || u.TotalTokens != ntok+8 {
				t.Errorf("usage %+v", u)
			}
			if local.ID != "cmpl-local-1" || local.Object != "text_completion" || local.KVTransferParams != nil ||
				*local.Choices[0].FinishReason != "length" {
				t.Errorf("local answer %+v", local)
			}
			// Several requests, to fragment the free lists.
			for i := range 5 {
				pr := strings.Repeat(fmt.Sprintf("w%d ", i), 10+i*13) + prompt
				want := p.complete(t, p.prefill.URL(), "", req(pr, 4+i)).Choices[0].Text
				got := p.disagg(t, fmt.Sprintf("req-%d", i), req(pr, 4+i))
				if got.Choices[0].Text != want {
					t.Errorf("request %d: disaggregated text %q, local %q", i, got.Choices[0].Text, want)
				}
				if got.Usage.CompletionTokens != 4+i || got.Usage.PromptTokens != len(strings.Fields(pr)) {
					t.Errorf("usage %+v", got.Usage)
				}
			}
			// Token ids as the prompt.
			ids := []int{1, 2, 3, 31999, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
			want := p.complete(t, p.decode.URL(), "", req(ids, 3)).Choices[0].Text
			if got := p.disagg(t, "ids", req(ids, 3)).Choices[0].Text; got != want {
				t.Errorf("token-id prompt: %q, local %q", got, want)
			}
			st := p.decode.Stats()
			if st.KVBytesVerified == 0 || st.KVVerifyFailures != 0 || st.RequestsDone != 8 {
				t.Errorf("decode stats %+v", st)
			}
			idle(t, p)
		})
	}
}

func TestKVCorruption(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			hook := func(id string, rank int, l descriptors.Layout, blocks []int, mem []byte) {
				if strings.HasPrefix(id, "bad-") && rank == 1 {
					off := 3*int(l.RegionLen()) + blocks[1]*int(l.BlockLen()) + 5
					mem[off] ^= 0x40
				}
			}
			p := newPair(t, conn, opts{hook: hook})
			want := p.complete(t, p.decode.URL(), "", req(prompt, 6)).Choices[0].Text
			if got := p.disagg(t, "good-1", req(prompt, 6)).Choices[0].Text; got != want {
				t.Fatalf("good request: %q, want %q", got, want)
			}
			// 25 tokens: 2 blocks x 4 regions x 2 heads x 16 tokens x 16 bytes, 2 ranks.
			const perRequest = 2 * 4 * 2 * 16 * 16 * 2
			if st := p.decode.Stats(); st.KVBytesVerified != perRequest {
				t.Errorf("verified %d bytes, want %d", st.KVBytesVerified, perRequest)
			}
			if got := p.disagg(t, "bad-1", req(prompt, 6)).Choices[0].Text; got == want {
				t.Errorf("corrupted KV gave the same text %q", got)
			}
			if st := p.decode.Stats(); st.KVVerifyFailures != 1 || st.RequestsDone != 3 || st.KVBytesVerified != 2*perRequest-16 {
				t.Errorf("decode stats %+v, want 1 verify failure", st)
			}
			idle(t, p)
		})
	}
}

// sse reads a stream's events.
func sse(t *testing.T, r io.Reader) []string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %q", s)
	}
	var out []string
	for _, ev := range strings.SplitAfter(s, "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasPrefix(ev, "data: ") || !strings.HasSuffix(ev, "\n\n") || strings.Count(ev, "\n") != 2 {
			t.Fatalf("bad SSE event %q", ev)
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(ev, "data: "), "\n\n"))
	}
	return out
}

func TestStream(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	want := p.complete(t, p.decode.URL(), "", req(prompt, 5)).Choices[0].Text
	pre := p.complete(t, p.prefill.URL(), "s-1", with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}))
	for _, remote := range []bool{false, true} {
		body := with(with(req(prompt, 5), "stream", true), "stream_options", map[string]any{"include_usage": true})
		if remote {
			body = with(body, "kv_transfer_params", pre.KVTransferParams)
		}
		b, _ := json.Marshal(body)
		hr, _ := http.NewRequest("POST", p.decode.URL()+"/v1/completions", bytes.NewReader(b))
		hr.Header.Set("X-Request-Id", "s-1")
		resp, err := p.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
		}
		evs := sse(t, resp.Body)
		resp.Body.Close()
		if len(evs) != 5+2 {
			t.Fatalf("%d events, want 5 tokens + usage + [DONE]: %q", len(evs), evs)
		}
		var text string
		for i, ev := range evs[:5] {
			var c completion
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatal(err)
			}
			if c.ID != "cmpl-s-1" || len(c.Choices) != 1 || strings.Contains(ev, `"usage"`) {
				t.Errorf("chunk %d: %s", i, ev)
			}
			if fr := c.Choices[0].FinishReason; (i < 4) != (fr == nil) || (fr != nil && *fr != "length") {
				t.Errorf("chunk %d finish_reason: %s", i, ev)
			}
			text += c.Choices[0].Text
		}
		if text != want {
			t.Errorf("remote=%v: streamed %q, want %q", remote, text, want)
		}
		var u completion
		json.Unmarshal([]byte(evs[5]), &u)
		if !strings.Contains(evs[5], `"choices":[]`) || u.Usage.CompletionTokens != 5 || u.Usage.TotalTokens != 5+len(strings.Fields(prompt)) {
			t.Errorf("usage chunk %s", evs[5])
		}
	}
	if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified == 0 {
		t.Errorf("decode stats %+v", st)
	}
	idle(t, p)
}

func TestClientDisconnect(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{compute: server.ComputeModel{DecodeBase: 5 * time.Millisecond}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Prefill the request as the proxy does; then stream from decode and leave.
			id := "gone-1"
			body := with(req(prompt, 1000), "stream", true)
			var kv map[string]any
			if conn == server.ConnPull {
				kv = p.complete(t, p.prefill.URL(), id, with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true})).KVTransferParams
			} else {
				info := p.prefill.Info()
				kv = map[string]any{"do_remote_prefill": true, "remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost,
					"remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": 1, "transfer_mode": "push", "transfer_id": "t-gone"}
			}
			b, _ := json.Marshal(with(body, "kv_transfer_params", kv))
			hr, _ := http.NewRequestWithContext(ctx, "POST", p.decode.URL()+"/v1/completions", bytes.NewReader(b))
			hr.Header.Set("X-Request-Id", id)
			done := make(chan *http.Response, 1)
			go func() {
				resp, err := p.client.Do(hr)
				if err != nil {
					t.Error(err)
					close(done)
					return
				}
				done <- resp
			}()
			if conn == server.ConnPush {
				eventually(t, "decode waiting", func() bool { return p.decode.Stats().Waiting == 1 })
				p.complete(t, p.prefill.URL(), id, with(req(prompt, 1), "kv_transfer_params",
					map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": "t-gone"}))
			}
			resp := <-done
			if resp == nil {
				return
			}
			br := bufio.NewReader(resp.Body)
			for range 3 {
				line, err := br.ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "data: {") {
					t.Fatalf("line %q, %v", line, err)
				}
				br.ReadString('\n')
			}
			if st := p.decode.Stats(); st.Running != 1 || st.BlocksInUse == 0 {
				t.Errorf("decode mid-stream: %+v", st)
			}
			cancel()
			resp.Body.Close()
			idle(t, p)
			eventually(t, "the abort counted", func() bool { return p.decode.Stats().RequestsAborted == 1 })
			if st := p.decode.Stats(); st.Running != 0 || st.Waiting != 0 {
				t.Errorf("decode after the disconnect: %+v", st)
			}
		})
	}
}

func TestHTTP(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	get := func(path string) (int, string) {
		resp, err := p.client.Get(p.decode.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health %d", code)
	}
	if _, body := get("/v1/models"); !strings.Contains(body, `"data":[{"id":"tiny","object":"model","owned_by":"gonixl"`) {
		t.Errorf("/v1/models %s", body)
	}
	_, body := get("/kv_transfer_info")
	var info map[string]any
	json.Unmarshal([]byte(body), &info)
	for _, k := range []string{"engine_id", "role", "connector", "model", "side_channel_host", "side_channel_port", "tp_size", "pp_size", "block_size"} {
		if _, ok := info[k]; !ok {
			t.Errorf("/kv_transfer_info lacks %s: %s", k, body)
		}
	}
	if info["role"] != "decode" || info["tp_size"] != 2.0 || info["side_channel_port"] == 0.0 {
		t.Errorf("/kv_transfer_info %s", body)
	}
	p.complete(t, p.decode.URL(), "", req(prompt, 2))
	_, metrics := get("/metrics")
	for _, name := range []string{"vllm:time_to_first_token_seconds_count", "vllm:time_per_output_token_seconds_bucket",
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", `tp_rank="1"`, "vllm:nixl_",
		"# TYPE gonixl_engine_kv_bytes_verified_total counter", "# TYPE gonixl_engine_kv_verify_failures_total counter",
		`model_name="tiny",result="done"} 1` + "\n", `model_name="tiny",result="failed"} 0` + "\n", `model_name="tiny",result="aborted"} 0` + "\n",
		"# TYPE go_goroutines gauge"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, tc := range []struct {
		body string
		code int
		typ  string
	}{
		{`{"model":`, 400, "invalid_request_error"},
		{`{"model":"other","prompt":"a"}`, 404, "invalid_request_error"},
		{`{"model":"tiny"}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":"a","max_tokens":0}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":[1,-2]}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":"a","max_tokens":100000}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_decode":true}}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_prefill":true}}`, 400, "invalid_request_error"},
		{`{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"transfer_mode":"push"}}`, 400, "invalid_request_error"},
		// A hold nobody has: the load fails (handshake with a port nobody listens on).
		{`{"model":"tiny","prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"r","remote_block_ids":[1],"remote_host":"127.0.0.1","remote_port":1,"tp_size":2}}`, 500, "server_error"},
	} {
		resp, err := p.client.Post(p.decode.URL()+"/v1/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.code || e.Error.Code != tc.code || e.Error.Type != tc.typ || e.Error.Message == "" {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", tc.body)
		}
	}
	idle(t, p)
}

func TestClose(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{compute: server.ComputeModel{DecodeBase: 2 * time.Millisecond}})
	// A prefill hold that no decode reads, a request in flight on decode.
	p.complete(t, p.prefill.URL(), "held", with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}))
	// The gauge is the loop's, set at the end of the step that answered.
	eventually(t, "prefill holding the blocks", func() bool { return p.prefill.Stats().BlocksInUse > 0 })
	res := make(chan completion, 1)
	go func() {
		b, _ := json.Marshal(req(prompt, 40))
		resp, err := p.client.Post(p.decode.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Error(err)
			res <- completion{}
			return
		}
		defer resp.Body.Close()
		var c completion
		json.NewDecoder(resp.Body).Decode(&c)
		res <- c
	}()
	eventually(t, "decode running", func() bool { return p.decode.Stats().Running == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.decode.Close(ctx) }()
	eventually(t, "/health 503 while draining", func() bool {
		resp, err := p.client.Get(p.decode.URL() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	if resp, body := p.post(t, p.decode.URL(), "", req(prompt, 1)); resp.StatusCode != 503 || !strings.Contains(string(body), "closing") {
		t.Errorf("request while closing: %d %s", resp.StatusCode, body)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if c := <-res; len(strings.Fields(c.Choices[0].Text)) != 40 {
		t.Errorf("request in flight during Close: %+v", c)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	p.prefill.Close(short) // the hold is released, not waited for past ctx
	for _, s := range []*server.Server{p.prefill, p.decode} {
		if st := s.Stats(); st.BlocksInUse != 0 || st.Running != 0 || st.Waiting != 0 {
			t.Errorf("%s after Close: %+v", s.Info().Role, st)
		}
	}
	if err := p.decode.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.client.Get(p.decode.URL() + "/health"); err == nil {
		t.Errorf("closed engine still answers")
	}
}

// Decode has blocks for one request at a time: the others wait (pull:
// with KeepAlive), then load; every text is right.
func TestQueuedForBlocks(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{decodeBlocks: 2, compute: server.ComputeModel{DecodeBase: time.Millisecond}})
			want := p.complete(t, p.decode.URL(), "", req(prompt, 6)).Choices[0].Text
			if conn == server.ConnPush {
				// Push registers only once decode has blocks: prefill
				// holds its blocks meanwhile.
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						info := p.prefill.Info()
						id, tid := fmt.Sprintf("q-%d", i), fmt.Sprintf("tq-%d", i)
						pre := with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": tid})
						if resp, b := p.post(t, p.prefill.URL(), id, pre); resp.StatusCode != 200 {
							t.Errorf("prefill %d: %s", resp.StatusCode, b)
						}
						dec := with(req(prompt, 6), "kv_transfer_params", map[string]any{"do_remote_prefill": true, "remote_engine_id": info.EngineID,
							"remote_host": info.SideChannelHost, "remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": 1,
							"transfer_mode": "push", "transfer_id": tid})
						resp, b := p.post(t, p.decode.URL(), id, dec)
						var c completion
						json.Unmarshal(b, &c)
						if resp.StatusCode != 200 || c.Choices[0].Text != want {
							t.Errorf("decode %d: %s", resp.StatusCode, b)
						}
					}()
				}
				wg.Wait()
			} else {
				var params []map[string]any
				for i := range 3 {
					params = append(params, p.complete(t, p.prefill.URL(), fmt.Sprintf("q-%d", i),
						with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true})).KVTransferParams)
				}
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, b := p.post(t, p.decode.URL(), fmt.Sprintf("q-%d", i), with(req(prompt, 6), "kv_transfer_params", params[i]))
						var c completion
						json.Unmarshal(b, &c)
						if resp.StatusCode != 200 || c.Choices[0].Text != want {
							t.Errorf("decode %d: %s", resp.StatusCode, b)
						}
					}()
				}
				wg.Wait()
			}
			if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.RequestsDone != 4 {
				t.Errorf("decode stats %+v", st)
			}
			idle(t, p)
		})
	}
}

// A client that leaves during prefill leaves no hold behind.
func TestPrefillClientGone(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{compute: server.ComputeModel{PrefillBase: 200 * time.Millisecond}})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			kv := map[string]any{"do_remote_decode": true}
			if conn == server.ConnPush {
				kv["transfer_mode"] = "push"
			}
			b, _ := json.Marshal(with(req(prompt, 1), "kv_transfer_params", kv))
			hr, _ := http.NewRequestWithContext(ctx, "POST", p.prefill.URL()+"/v1/completions", bytes.NewReader(b))
			if _, err := p.client.Do(hr); err == nil {
				t.Fatal("the request outlived its context")
			}
			eventually(t, "the abort counted", func() bool { return p.prefill.Stats().RequestsAborted == 1 })
			idle(t, p)
		})
	}
}

// A transfer that fails: decode answers 500 and frees its blocks.
func TestTransferFailure(t *testing.T) {
	for _, tc := range []struct{ conn, policy string }{
		{server.ConnPull, "fail"}, {server.ConnPush, "fail"}, {server.ConnPull, "recompute"}, {server.ConnPush, "recompute"}} {
		conn := tc.conn
		t.Run(conn+"/"+tc.policy, func(t *testing.T) {
			p := newPair(t, conn, opts{policy: tc.policy, fabric: func(f *loopback.Fabric) {
				if _, err := f.AddFault(loopback.Fault{Kind: loopback.FailPost}); err != nil {
					t.Fatal(err)
				}
			}})
			id := "fail-1"
			var resp *http.Response
			var body []byte
			if conn == server.ConnPull {
				kv := p.complete(t, p.prefill.URL(), id, with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true})).KVTransferParams
				resp, body = p.post(t, p.decode.URL(), id, with(req(prompt, 4), "kv_transfer_params", kv))
			} else {
				info := p.prefill.Info()
				done := make(chan struct{})
				go func() {
					defer close(done)
					resp, body = p.post(t, p.decode.URL(), id, with(req(prompt, 4), "kv_transfer_params", map[string]any{"do_remote_prefill": true,
						"remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost, "remote_port": info.SideChannelPort,
						"tp_size": info.TPSize, "pp_size": 1, "transfer_mode": "push", "transfer_id": "tf"}))
				}()
				eventually(t, "decode registered", func() bool { return p.decode.Stats().Waiting == 1 })
				p.complete(t, p.prefill.URL(), id, with(req(prompt, 1), "kv_transfer_params",
					map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": "tf"}))
				<-done
			}
			eventually(t, "decode blocks free", func() bool { return p.decode.Stats().BlocksInUse == 0 })
			if tc.policy == "recompute" {
				var c completion
				json.Unmarshal(body, &c)
				want := p.complete(t, p.decode.URL(), "", req(prompt, 4)).Choices[0].Text
				if resp.StatusCode != 200 || c.Choices[0].Text != want {
					t.Errorf("decode answered %d %s, want text %q", resp.StatusCode, body, want)
				}
				if st := p.decode.Stats(); st.KVRecomputed != 1 || st.RequestsFailed != 0 {
					t.Errorf("decode stats %+v", st)
				}
			} else {
				if resp.StatusCode != 500 || !strings.Contains(string(body), "KV transfer failed") || !strings.Contains(string(body), `"type":"server_error"`) {
					t.Errorf("decode answered %d %s", resp.StatusCode, body)
				}
				if st := p.decode.Stats(); st.RequestsFailed != 1 {
					t.Errorf("decode stats %+v", st)
				}
			}
			// Pull: prefill's hold ends at its lease (30 s); Close releases it.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			p.prefill.Close(ctx)
		})
	}
}

// Prefill and decode of other TP sizes: the KV content does not depend on
// how heads are split, so the text is the same.
func TestHeterogeneousTP(t *testing.T) {
	for _, tc := range []struct {
		conn     string
		ptp, dtp int
	}{{server.ConnPull, 2, 1}, {server.ConnPull, 1, 4}, {server.ConnPush, 2, 1}, {server.ConnPush, 1, 2}} {
		t.Run(fmt.Sprintf("%s/%d-%d", tc.conn, tc.ptp, tc.dtp), func(t *testing.T) {
			p := newPair(t, tc.conn, opts{prefillTP: tc.ptp, decodeTP: tc.dtp})
			want := p.complete(t, p.prefill.URL(), "", req(prompt, 5)).Choices[0].Text
			if got := p.disagg(t, "h-1", req(prompt, 5)).Choices[0].Text; got != want {
				t.Errorf("text %q, want %q", got, want)
			}
			if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified != 2*4*4*16*16 {
				t.Errorf("decode stats %+v", st)
			}
			idle(t, p)
		})
	}
}

// A decode client that leaves while its KV is on its way: every rank aborts,
// the blocks come back when the connector says so.
func TestDecodeClientGoneWhileLoading(t *testing.T) {
	p := newPair(t, server.ConnPush, opts{})
	info := p.prefill.Info()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(with(req(prompt, 4), "kv_transfer_params", map[string]any{"do_remote_prefill": true,
		"remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost, "remote_port": info.SideChannelPort,
		"tp_size": info.TPSize, "pp_size": 1, "transfer_mode": "push", "transfer_id": "never"}))
	hr, _ := http.NewRequestWithContext(ctx, "POST", p.decode.URL()+"/v1/completions", bytes.NewReader(b))
	errc := make(chan error, 1)
	go func() {
		_, err := p.client.Do(hr)
		errc <- err
	}()
	eventually(t, "decode registered", func() bool { return p.decode.Stats().Waiting == 1 && p.decode.Stats().BlocksInUse > 0 })
	cancel()
	if err := <-errc; err == nil {
		t.Error("the request outlived its context")
	}
	idle(t, p)
	eventually(t, "the abort counted", func() bool { return p.decode.Stats().RequestsAborted == 1 })
	if st := p.decode.Stats(); st.Waiting != 0 || st.RequestsFailed != 0 {
		t.Errorf("decode stats %+v", st)
	}
}
