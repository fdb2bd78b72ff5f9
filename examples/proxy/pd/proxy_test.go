package pd

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const clientBody = `{"model":"toy","prompt":"hello","max_tokens":16,"temperature":0,"stream":false}`

func mustEqualJSON(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func TestPullFlow(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	if h.p.Connector() != ConnectorPull {
		t.Fatalf("connector %q, want pull (asked the engines)", h.p.Connector())
	}

	resp := h.post(t, context.Background(), clientBody, map[string]string{"X-Request-Id": "req-1", "Authorization": "Bearer k"})
	got := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	pr, dr := pf.requests(), df.requests()
	if len(pr) != 1 || len(dr) != 1 {
		t.Fatalf("prefill got %d, decode %d requests; want 1 each", len(pr), len(dr))
	}
	mustEqualJSON(t, "prefill leg", pr[0].body, map[string]any{
		"model": "toy", "prompt": "hello", "max_tokens": float64(1), "temperature": float64(0), "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil},
	})
	mustEqualJSON(t, "decode leg", dr[0].body, map[string]any{
		"model": "toy", "prompt": "hello", "max_tokens": float64(16), "temperature": float64(0), "stream": false,
		"kv_transfer_params": prefillKV(pf, pr[0]),
	})
	for _, rec := range []recorded{pr[0], dr[0]} {
		if id := rec.header.Get("X-Request-Id"); id != "req-1" {
			t.Errorf("leg X-Request-Id %q, want the client's req-1", id)
		}
		if a := rec.header.Get("Authorization"); a != "Bearer k" {
			t.Errorf("leg Authorization %q", a)
		}
		if ct := rec.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("leg Content-Type %q", ct)
		}
	}
	// The client gets decode's answer as it is.
	m := decodeJSON(t, got)
	if m["choices"].([]any)[0].(map[string]any)["text"] != " world" || m["object"] != "text_completion" {
		t.Fatalf("client got %s", got)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	// Without X-Request-Id the proxy makes one, the same on both legs.
	resp = h.post(t, context.Background(), `{"model":"toy","prompt":[1,2,3],"max_tokens":4}`, nil)
	readAll(t, resp)
	pr, dr = pf.requests(), df.requests()
	id := pr[1].header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("generated X-Request-Id %q is not a UUID", id)
	}
	if d := dr[1].header.Get("X-Request-Id"); d != id {
		t.Fatalf("decode X-Request-Id %q, prefill %q", d, id)
	}
	if !reflect.DeepEqual(pr[1].body["prompt"], []any{float64(1), float64(2), float64(3)}) {
		t.Fatalf("token-id prompt became %v", pr[1].body["prompt"])
	}
	if s := h.p.Stats(); s != (Stats{Requests: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestPullStreamPassthrough(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	sent := make(chan struct{})
	next := make(chan struct{})
	df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		streamSSE(w, func(i int) {
			if i == 1 {
				close(sent)
				<-next // the client must see chunk 0 before chunk 1 exists: the proxy flushes
			}
		})
	})
	h := newHarness(t, Config{Connector: "pull"}, []*fake{pf}, []*fake{df})
	body := `{"model":"toy","prompt":"hello","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`
	resp := h.post(t, context.Background(), body, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	<-sent
	first := make([]byte, len(sseChunks[0]))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	close(next)
	rest := readAll(t, resp)
	if got, want := string(first)+string(rest), strings.Join(sseChunks, ""); got != want {
		t.Fatalf("stream changed:\n got %q\nwant %q", got, want)
	}
	pb, db := pf.requests()[0].body, df.requests()[0].body
	if _, ok := pb["stream_options"]; ok || pb["stream"] != false || pb["max_tokens"] != float64(1) {
		t.Fatalf("prefill leg %v", pb)
	}
	if db["stream"] != true || !reflect.DeepEqual(db["stream_options"], map[string]any{"include_usage": true}) || db["max_tokens"] != float64(2) {
		t.Fatalf("decode leg %v", db)
	}
}

func TestPushFlow(t *testing.T) {
	decodeSent := make(chan struct{})
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		select {
		case <-decodeSent: // both legs in flight at once
		case <-time.After(5 * time.Second):
			t.Error("prefill leg answered before the decode leg was sent")
		}
		answerJSON(f, w, r, rec)
	})
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		close(decodeSent)
		streamSSE(w, nil)
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	if h.p.Connector() != ConnectorPush {
		t.Fatalf("connector %q", h.p.Connector())
	}
	body := `{"model":"toy","prompt":"hello","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`
	resp := h.post(t, context.Background(), body, map[string]string{"X-Request-Id": "push-1"})
	if got := string(readAll(t, resp)); got != strings.Join(sseChunks, "") {
		t.Fatalf("client got %q", got)
	}
	pr, dr := pf.requests(), df.requests()
	if len(pr) != 1 || len(dr) != 1 {
		t.Fatalf("prefill got %d, decode %d requests", len(pr), len(dr))
	}
	tid, _ := dr[0].body["kv_transfer_params"].(map[string]any)["transfer_id"].(string)
	if len(tid) < 16 {
		t.Fatalf("transfer_id %q", tid)
	}
	mustEqualJSON(t, "decode leg", dr[0].body, map[string]any{
		"model": "toy", "prompt": "hello", "max_tokens": float64(2), "stream": true, "stream_options": map[string]any{"include_usage": true},
		"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_engine_id": pf.info.EngineID,
			"remote_host": "10.1.2.3", "remote_port": float64(pf.info.SideChannelPort), "tp_size": float64(2), "pp_size": float64(1),
			"transfer_mode": "push", "transfer_id": tid},
	})
	mustEqualJSON(t, "prefill leg", pr[0].body, map[string]any{
		"model": "toy", "prompt": "hello", "max_tokens": float64(1), "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": tid},
	})
	if pr[0].header.Get("X-Request-Id") != "push-1" || dr[0].header.Get("X-Request-Id") != "push-1" {
		t.Fatalf("X-Request-Id prefill %q decode %q", pr[0].header.Get("X-Request-Id"), dr[0].header.Get("X-Request-Id"))
	}
}

func TestPullPrefillRetried(t *testing.T) {
	bad := newFake(t, "prefill", "pull", answer500)
	good := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{bad, good}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, map[string]string{"X-Request-Id": "r"})
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if len(bad.requests()) != 1 || len(good.requests()) != 1 || len(df.requests()) != 1 {
		t.Fatalf("bad %d good %d decode %d", len(bad.requests()), len(good.requests()), len(df.requests()))
	}
	if good.requests()[0].header.Get("X-Request-Id") != "r" {
		t.Fatal("retry lost the request id")
	}
	if df.requests()[0].body["kv_transfer_params"].(map[string]any)["remote_engine_id"] != good.info.EngineID {
		t.Fatal("decode did not get the retried prefill's params")
	}
	if s := h.p.Stats(); s.Retried != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPullBothPrefillFail(t *testing.T) {
	a := newFake(t, "prefill", "pull", answer500)
	b := newFake(t, "prefill", "pull", answer500)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{a, b}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	e := decodeJSON(t, body)["error"].(map[string]any)
	if e["code"] != float64(502) || e["type"] != "server_error" || !strings.Contains(e["message"].(string), "engine exploded") {
		t.Fatalf("error %v", e)
	}
	if len(a.requests())+len(b.requests()) != 2 || len(df.requests()) != 0 {
		t.Fatalf("prefill got %d+%d, decode %d", len(a.requests()), len(b.requests()), len(df.requests()))
	}
	if s := h.p.Stats(); s.Retried != 1 || s.Failed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPrefill4xxPassedThrough(t *testing.T) {
	pf := newFake(t, "prefill", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "prompt too long", "type": "BadRequestError", "code": 400}})
	})
	other := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{pf, other}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "prompt too long") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if len(other.requests()) != 0 || h.p.Stats().Retried != 0 {
		t.Fatal("a 4xx was retried")
	}
}

func TestPrefillUnreachableRetried(t *testing.T) {
	dead := newFake(t, "prefill", "pull", nil)
	good := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{dead, good}, []*fake{df})
	dead.srv.Close()
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if s := h.p.Stats(); s.Retried != 1 {
		t.Fatalf("stats %+v", s)
	}
	// The dead engine is out of rotation at once, without waiting for a health check.
	resp = h.post(t, context.Background(), clientBody, nil)
	readAll(t, resp)
	if s := h.p.Stats(); s.Retried != 1 || len(good.requests()) != 2 {
		t.Fatalf("stats %+v, good got %d", s, len(good.requests()))
	}
}

func TestNoEngineInRotation(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	pf.health.Store(503)
	h := newHarness(t, Config{Connector: "pull"}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 503 || decodeJSON(t, body)["error"].(map[string]any)["code"] != float64(503) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if len(pf.requests()) != 0 {
		t.Fatal("an unhealthy engine got a request")
	}
	get := func() (int, string) {
		resp, err := h.front.Client().Get(h.front.URL + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(readAll(t, resp))
	}
	if s, _ := get(); s != 503 {
		t.Fatalf("/healthcheck %d with no prefill engine", s)
	}
	pf.health.Store(0) // recovers: back in rotation at the next health check
	eventually(t, "/healthcheck 200", func() bool { s, _ := get(); return s == 200 })
	if _, b := get(); b != `{"status":"ok"}` {
		t.Fatalf("/healthcheck body %s", b)
	}
	resp = h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("after recovery: %d %s", resp.StatusCode, b)
	}
	df.health.Store(500)
	eventually(t, "/healthcheck 503", func() bool { s, _ := get(); return s == 503 })
}

func TestTimeout504(t *testing.T) {
	pf := newFake(t, "prefill", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		f.waitCancelled(r)
	})
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{RequestTimeout: 100 * time.Millisecond}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 504 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	eventually(t, "prefill leg cancelled", func() bool { return len(pf.cancels()) == 1 })
}

func TestPullClientDisconnect(t *testing.T) {
	t.Run("mid-stream", func(t *testing.T) {
		pf := newFake(t, "prefill", "pull", nil)
		df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
			streamSSE(w, func(i int) {
				if i == 1 {
					f.waitCancelled(r)
				}
			})
		})
		h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
		ctx, cancel := context.WithCancel(context.Background())
		resp := h.post(t, ctx, `{"model":"toy","prompt":"hi","max_tokens":9,"stream":true}`, map[string]string{"X-Request-Id": "gone"})
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q %v", line, err)
		}
		cancel()
		resp.Body.Close()
		eventually(t, "decode leg cancelled", func() bool { return len(df.cancels()) == 1 })
		eventually(t, "ClientCancelled", func() bool { return h.p.Stats().ClientCancelled == 1 })
		if s := h.p.Stats(); s.Failed != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("during prefill", func(t *testing.T) {
		pf := newFake(t, "prefill", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
			f.waitCancelled(r)
		})
		df := newFake(t, "decode", "pull", nil)
		h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.front.URL+"/v1/completions", strings.NewReader(clientBody))
			if resp, err := h.front.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		pf.nextRequest(t)
		cancel()
		<-done
		eventually(t, "prefill leg cancelled", func() bool { return len(pf.cancels()) == 1 })
		eventually(t, "ClientCancelled", func() bool { return h.p.Stats().ClientCancelled == 1 })
		if len(df.requests()) != 0 {
			t.Fatal("decode leg sent after the client went away")
		}
	})
}

func TestPushClientDisconnect(t *testing.T) {
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		f.waitCancelled(r) // still "writing" when the client goes
	})
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		streamSSE(w, func(i int) {
			if i == 1 {
				f.waitCancelled(r)
			}
		})
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.post(t, ctx, `{"model":"toy","prompt":"hi","max_tokens":9,"stream":true}`, nil)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Both legs leave at once; decode may stream before the prefill leg has
	// reached its engine. Go away only once both are there.
	eventually(t, "prefill leg arrived", func() bool { return len(pf.requests()) == 1 })
	cancel()
	resp.Body.Close()
	eventually(t, "both legs cancelled", func() bool { return len(pf.cancels()) == 1 && len(df.cancels()) == 1 })
	eventually(t, "ClientCancelled", func() bool { return h.p.Stats().ClientCancelled == 1 })
}

// In push, a failing prefill leg cancels the decode leg; the pair is retried once on
// another prefill engine with a new transfer id.
func TestPushPrefillFailRetriesPair(t *testing.T) {
	good := newFake(t, "prefill", "push", nil)
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		tid := rec.body["kv_transfer_params"].(map[string]any)["transfer_id"]
		for {
			for _, g := range good.requests() {
				if g.body["kv_transfer_params"].(map[string]any)["transfer_id"] == tid {
					answerJSON(f, w, r, rec)
					return
				}
			}
			select {
			case <-r.Context().Done():
				f.mu.Lock()
				f.cancelled = append(f.cancelled, tid.(string))
				f.mu.Unlock()
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	bad := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if partner, _ := f.pushPartner(r, rec, df); partner != nil { // decode registered
			answer500(f, w, r, rec)
		}
	})
	h := newHarness(t, Config{}, []*fake{bad, good}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	dr := df.requests()
	if len(dr) != 2 || len(bad.requests()) != 1 || len(good.requests()) != 1 {
		t.Fatalf("decode %d bad %d good %d", len(dr), len(bad.requests()), len(good.requests()))
	}
	tid0 := dr[0].body["kv_transfer_params"].(map[string]any)["transfer_id"]
	tid1 := dr[1].body["kv_transfer_params"].(map[string]any)["transfer_id"]
	if tid0 == tid1 || bad.requests()[0].body["kv_transfer_params"].(map[string]any)["transfer_id"] != tid0 {
		t.Fatalf("transfer ids %v %v", tid0, tid1)
	}
	if dr[1].body["kv_transfer_params"].(map[string]any)["remote_engine_id"] != good.info.EngineID {
		t.Fatal("second decode leg does not name the second prefill engine")
	}
	eventually(t, "first decode leg cancelled", func() bool { c := df.cancels(); return len(c) == 1 && c[0] == tid0 })
	if s := h.p.Stats(); s.Retried != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPushPrefillFail502(t *testing.T) {
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		f.waitCancelled(r)
	})
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if partner, _ := f.pushPartner(r, rec, df); partner != nil { // decode registered
			answer500(f, w, r, rec)
		}
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, map[string]string{"X-Request-Id": "x"})
	body := readAll(t, resp)
	if resp.StatusCode != 502 || decodeJSON(t, body)["error"].(map[string]any)["code"] != float64(502) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	eventually(t, "decode leg cancelled", func() bool { return len(df.cancels()) == 1 })
	if s := h.p.Stats(); s.Failed != 1 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// least_outstanding sends a request to the idle engine where round robin would not.
func TestLeastOutstanding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		role   string // the role whose choice is checked
	}{
		{"pull decode (always load-aware)", "", "decode"},
		{"prefill policy", "least_outstanding", "prefill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := make(chan struct{})
			blocking := func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
				if rec.header.Get("X-Request-Id") == "held" {
					<-hold
				}
				answerJSON(f, w, r, rec)
			}
			var pool []*fake
			for range 2 {
				pool = append(pool, newFake(t, tc.role, "pull", blocking))
			}
			other := newFake(t, map[string]string{"decode": "prefill", "prefill": "decode"}[tc.role], "pull", nil)
			var h *harness
			if tc.role == "decode" {
				h = newHarness(t, Config{Policy: tc.policy}, []*fake{other}, pool)
			} else {
				h = newHarness(t, Config{Policy: tc.policy}, pool, []*fake{other})
			}
			done := make(chan struct{})
			go func() { // request 1 is held on engine 0
				defer close(done)
				resp := h.post(t, context.Background(), clientBody, map[string]string{"X-Request-Id": "held"})
				readAll(t, resp)
			}()
			pool[0].nextRequest(t)
			for i, want := range []int{1, 1} { // round robin would give engine 0 the second one
				resp := h.post(t, context.Background(), clientBody, nil)
				readAll(t, resp)
				if n := len(pool[want].requests()); n != i+1 {
					t.Fatalf("request %d: engine %d has %d requests; engine 0 (busy) has %d", i+2, want, n, len(pool[0].requests()))
				}
			}
			close(hold)
			<-done
		})
	}
}

func TestModelsAndRoutes(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	resp, err := h.front.Client().Get(h.front.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), df.info.EngineID) {
		t.Fatalf("/v1/models %d %s", resp.StatusCode, b)
	}
	resp, _ = h.front.Client().Get(h.front.URL + "/v1/completions")
	if readAll(t, resp); resp.StatusCode != 405 {
		t.Fatalf("GET /v1/completions: %d", resp.StatusCode)
	}
	resp = h.post(t, context.Background(), `not json`, nil)
	if b := readAll(t, resp); resp.StatusCode != 400 || decodeJSON(t, b)["error"] == nil {
		t.Fatalf("bad body: %d %s", resp.StatusCode, b)
	}
}

func TestConnectorDiscovery(t *testing.T) {
	pf := newFake(t, "prefill", "push", nil)
	df := newFake(t, "decode", "pull", nil)
	_, err := New(Config{Prefill: []string{pf.srv.URL}, Decode: []string{df.srv.URL}})
	if err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("mixed connectors: %v", err)
	}
	// With the connector given, an engine speaking the other one stays out of rotation.
	p, err := New(Config{Prefill: []string{pf.srv.URL}, Decode: []string{df.srv.URL}, Connector: "pull"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.inRotationCount(p.pools().prefill) != 0 || p.inRotationCount(p.pools().decode) != 1 {
		t.Fatalf("in rotation: prefill %d decode %d", p.inRotationCount(p.pools().prefill), p.inRotationCount(p.pools().decode))
	}
	// An engine listed as prefill that says it is a decode engine stays out of rotation.
	wrong := newFake(t, "decode", "pull", nil)
	p2, err := New(Config{Prefill: []string{wrong.srv.URL}, Decode: []string{df.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if p2.inRotationCount(p2.pools().prefill) != 0 {
		t.Fatal("a decode engine listed as prefill is in rotation")
	}
	if _, err := New(Config{Prefill: []string{"127.0.0.1:1"}, Decode: []string{"127.0.0.1:1"}}); err == nil {
		t.Fatal("no connector and no engine: want an error")
	}
	for _, cfg := range []Config{{Decode: []string{"x"}}, {Prefill: []string{"a"}, Decode: []string{"b"}, Connector: "nope"}, {Prefill: []string{"a"}, Decode: []string{"b"}, Policy: "random"}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("config %+v: want an error", cfg)
		}
	}
}

// Push: decode already streaming when prefill fails: the decode leg is cancelled and the
// stream ends with an error event naming prefill's failure, then [DONE]; the request
// counts as failed.
func TestPushPrefillFailsWhileDecodeStreams(t *testing.T) {
	streaming := make(chan struct{}) // the client has decode's first chunk
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		<-streaming
		answer500(f, w, r, rec)
	})
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		streamSSE(w, func(i int) {
			if i == 1 {
				f.waitCancelled(r)
			}
		})
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), `{"model":"toy","prompt":"hi","max_tokens":9,"stream":true}`, nil)
	first := make([]byte, len(sseChunks[0]))
	if _, err := io.ReadFull(resp.Body, first); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	close(streaming)
	rest := string(readAll(t, resp))
	if !strings.HasPrefix(rest, "\n\ndata: {\"error\":") || !strings.Contains(rest, "prefill engine "+pf.srv.URL+" failed: ") ||
		!strings.Contains(rest, "engine exploded") || !strings.HasSuffix(rest, "\n\ndata: [DONE]\n\n") || strings.Contains(rest, sseChunks[1]) {
		t.Fatalf("stream after prefill failed: %q, want only an error event naming prefill's failure and [DONE]", rest)
	}
	eventually(t, "decode leg cancelled", func() bool { return len(df.cancels()) == 1 })
	eventually(t, "Failed", func() bool { return h.p.Stats().Failed == 1 })
	if s := h.p.Stats(); s.ClientCancelled != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDecodeErrors(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", answer500)
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 502 || !strings.Contains(string(body), "engine exploded") {
		t.Fatalf("decode 500: %d %s", resp.StatusCode, body)
	}
	df404 := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404}})
	})
	h404 := newHarness(t, Config{}, []*fake{pf}, []*fake{df404})
	resp = h404.post(t, context.Background(), clientBody, nil)
	if body := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(string(body), "does not exist") {
		t.Fatalf("decode 404: %d %s", resp.StatusCode, body)
	}
	if s := h.p.Stats(); s.Failed != 1 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A request's failure takes an engine out of rotation until its next health check, but
// never the last ones: with every candidate suspect, they stay candidates (one transient
// error on a loaded host must not become 503s for a health interval). A failed health
// check does take an engine out.
func TestSuspectEnginesAreTheLastResort(t *testing.T) {
	pa, pb := newFake(t, "prefill", "pull", nil), newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour}, []*fake{pa, pb}, []*fake{df})
	pool := h.p.pools().prefill
	eventually(t, "both prefill engines in rotation", func() bool { return h.p.inRotationCount(pool) == 2 })
	var rr atomic.Uint64
	pool[0].markDown()
	for range 4 {
		e, release := h.p.pick(pool, &rr, PolicyRoundRobin, nil)
		if e != pool[1] {
			t.Fatalf("picked %v, want the engine not suspect", e)
		}
		release()
	}
	if n := h.p.inRotationCount(pool); n != 1 {
		t.Fatalf("%d in rotation, want 1", n)
	}
	pool[1].markDown()
	seen := map[*engine]bool{}
	for range 4 {
		e, release := h.p.pick(pool, &rr, PolicyRoundRobin, nil)
		if e == nil {
			t.Fatal("every engine suspect: nothing picked")
		}
		seen[e] = true
		release()
	}
	if len(seen) != 2 {
		t.Fatalf("suspect engines picked: %d, want both", len(seen))
	}
	for _, e := range pool {
		e.mu.Lock()
		e.healthy = false // as a failed health check leaves it
		e.mu.Unlock()
	}
	if e, _ := h.p.pick(pool, &rr, PolicyRoundRobin, nil); e != nil {
		t.Fatal("an engine that failed its health check was picked")
	}
}
