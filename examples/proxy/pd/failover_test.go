package pd

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answer503 refuses as the reference engine does when it drains: before taking the request in.
func answer503(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"message": "engine closing", "type": "server_error", "code": 503}})
}

// Pull: a decode engine's 503 sends the same KV to another decode engine; prefill runs once.
func TestPullDecode503FailsOverWithSameKV(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	refusing := newFake(t, "decode", "pull", answer503)
	good := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{refusing, good})
	for range 4 {
		h.postOK(t)
	}
	// Least outstanding ties go round robin, two picks per request: every request starts on
	// the refusing engine (a 503 leaves it in rotation).
	if len(pf.requests()) != 4 || len(refusing.requests()) != 4 || len(good.requests()) != 4 {
		t.Fatalf("prefill %d, refusing decode %d, good decode %d: want 4, 4, 4", len(pf.requests()), len(refusing.requests()), len(good.requests()))
	}
	for i, rec := range refusing.requests() {
		if got := good.requests()[i].body["kv_transfer_params"]; !reflect.DeepEqual(got, rec.body["kv_transfer_params"]) {
			t.Fatalf("retry %d carries %v, want the refused leg's %v", i, got, rec.body["kv_transfer_params"])
		}
	}
	if s := h.p.Stats(); s != (Stats{Requests: 4, Retried: 4, DecodeFailovers: 4}) {
		t.Fatalf("stats %+v, want 4 requests, 4 retried, 4 decode failovers", s)
	}
}

// Pull: decode took the request in, then failed: a 500, or the connection closed after the
// request was sent. Neither goes to another decode engine (a READ may have been posted); a 500
// would go to another prefill engine, of which there is none here.
func TestPullDecodeAfterAcceptNotFailedOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded)
		want   string
	}{
		{"500", answer500, "engine exploded"},
		{"connection closed", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "could not be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf := newFake(t, "prefill", "pull", nil)
			bad := newFake(t, "decode", "pull", tc.answer)
			other := newFake(t, "decode", "pull", nil)
			h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{bad, other})
			resp := h.post(t, context.Background(), clientBody, nil)
			if b := readAll(t, resp); resp.StatusCode != 502 || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if n := len(other.requests()); n != 0 {
				t.Fatalf("the other decode engine got %d requests, want 0", n)
			}
			if s := h.p.Stats(); s != (Stats{Requests: 1, Failed: 1}) || len(pf.requests()) != 1 || len(bad.requests()) != 1 {
				t.Fatalf("stats %+v, %d prefill legs, %d decode legs; want 1 failed, no retry, 1 and 1", s, len(pf.requests()), len(bad.requests()))
			}
		})
	}
}

// Push: decode's 503 before prefill answered: the pair again with another decode engine; the
// first pair's prefill leg is cancelled.
func TestPushDecode503FailsOver(t *testing.T) {
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.body["kv_transfer_params"].(map[string]any)["transfer_id"] == nil {
			t.Error("prefill leg without transfer_id")
		}
		// The first pair's leg waits for decode's blocks, which never come:
		// the proxy cancels it. Under load it may be cancelled before it
		// reaches this engine at all; so every leg waits a while for its
		// cancel, and a leg not cancelled by then (the second pair's) is
		// answered.
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			f.cancelled = append(f.cancelled, r.Header.Get("X-Request-Id"))
			f.mu.Unlock()
		case <-time.After(300 * time.Millisecond):
			answerJSON(f, w, r, rec)
		}
	})
	refusing := newFake(t, "decode", "push", answer503)
	good := newFake(t, "decode", "push", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{refusing, good})
	h.postOK(t)
	// The first pair's prefill leg, when it reached the engine, was cancelled.
	if n := len(pf.requests()); len(refusing.requests()) != 1 || len(good.requests()) != 1 || n < 1 || n > 2 || len(pf.cancels()) != n-1 {
		t.Fatalf("refusing %d, good %d, prefill %d (cancelled %d): want 1, 1, 2 (1) or 1 (0)", len(refusing.requests()), len(good.requests()), n, len(pf.cancels()))
	}
	if s := h.p.Stats(); s != (Stats{Requests: 1, Retried: 1, DecodeFailovers: 1}) {
		t.Fatalf("stats %+v", s)
	}
}

// takeIn answers a decode leg's TakenInHeader as the reference engine does: 103 with the
// header, before anything else.
func takeIn(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(TakenInHeader) != "" {
		w.Header().Set(TakenInHeader, "1")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del(TakenInHeader)
	}
}

// hangUp closes the connection under the request with no answer, as a decode engine that
// died does to a request sent on a connection the proxy kept alive.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// Pull: a decode engine that announces taking requests in (it did for its first request)
// closes the connection under the second before it said so: nothing was read, and the
// same KV goes to the other decode engine. The client sees only successes.
func TestPullDecodeClosedBeforeTakenInFailsOver(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	var n atomic.Int32
	dying := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if n.Add(1) == 1 {
			takeIn(w, r)
			answerJSON(f, w, r, rec)
			return
		}
		hangUp(w)
	})
	other := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		takeIn(w, r)
		answerJSON(f, w, r, rec)
	})
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{dying, other})
	sent := 0
	for ; len(dying.requests()) < 2 && sent < 20; sent++ {
		h.postOK(t)
	}
	if got := len(dying.requests()); got != 2 {
		t.Fatalf("the dying decode engine got %d requests in %d, want 2", got, sent)
	}
	last := dying.requests()[1].body["kv_transfer_params"]
	if got := other.requests()[len(other.requests())-1].body["kv_transfer_params"]; !reflect.DeepEqual(got, last) {
		t.Fatalf("the retry carries %v, want the closed leg's %v", got, last)
	}
	if s := h.p.Stats(); s != (Stats{Requests: uint64(sent), Retried: 1, DecodeFailovers: 1}) {
		t.Fatalf("stats %+v, want %d requests, 1 retried, 1 decode failover", s, sent)
	}
	if dying.requests()[0].header.Get(TakenInHeader) != "1" {
		t.Fatalf("decode leg headers %v: want %s: 1", dying.requests()[0].header, TakenInHeader)
	}
	if pf.requests()[0].header.Get(TakenInHeader) != "" {
		t.Fatalf("the prefill leg asks for %s", TakenInHeader)
	}
}

// Pull: a connection that closes after decode said it took the request in is not failed
// over (a READ may have been posted), nor one from an engine that never says so (vLLM's:
// its EOF cannot be told from a death after a READ).
func TestPullDecodeClosedAfterTakenInNotFailedOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded)
	}{
		{"after 103", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
			takeIn(w, r)
			time.Sleep(10 * time.Millisecond) // the 103 is read before the close
			hangUp(w)
		}},
		{"never announces", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) { hangUp(w) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf := newFake(t, "prefill", "pull", nil)
			bad := newFake(t, "decode", "pull", tc.answer)
			other := newFake(t, "decode", "pull", nil)
			h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{bad, other})
			resp := h.post(t, context.Background(), clientBody, nil)
			if b := readAll(t, resp); resp.StatusCode != 502 || !strings.Contains(string(b), "could not be reached") {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if s := h.p.Stats(); s != (Stats{Requests: 1, Failed: 1}) || len(other.requests()) != 0 {
				t.Fatalf("stats %+v, other decode engine %d requests; want 1 failed, no retry", s, len(other.requests()))
			}
		})
	}
}

// Push: a decode engine that announces closes the connection under a leg before it took
// it in (it registered no blocks): the pair again with the other decode engine.
func TestPushDecodeClosedBeforeTakenInFailsOver(t *testing.T) {
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		select { // as in TestPushDecode503FailsOver: a cancelled first pair, or an answer
		case <-r.Context().Done():
		case <-time.After(300 * time.Millisecond):
			answerJSON(f, w, r, rec)
		}
	})
	var n atomic.Int32
	dying := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if n.Add(1) == 1 {
			takeIn(w, r)
			answerJSON(f, w, r, rec)
			return
		}
		hangUp(w)
	})
	other := newFake(t, "decode", "push", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{dying, other})
	sent := 0
	for ; len(dying.requests()) < 2 && sent < 20; sent++ {
		h.postOK(t)
	}
	if got := len(dying.requests()); got != 2 {
		t.Fatalf("the dying decode engine got %d requests in %d, want 2", got, sent)
	}
	if s := h.p.Stats(); s != (Stats{Requests: uint64(sent), Retried: 1, DecodeFailovers: 1}) {
		t.Fatalf("stats %+v, want %d requests, 1 retried, 1 decode failover", s, sent)
	}
}
