package pd

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
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
	refusing := newFake(t, "decode", "push", answer503)
	good := newFake(t, "decode", "push", nil)
	var answered []any // transfer ids of the prefill legs answered
	var mu sync.Mutex
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if transferID(rec) == nil {
			t.Error("prefill leg without transfer_id")
		}
		// The first pair's leg would wait for decode's blocks, which never come: it waits
		// for the proxy to cancel it (it may also be cancelled before it reaches this
		// engine at all). The second pair's is answered.
		switch partner, _ := f.pushPartner(r, rec, refusing, good); partner {
		case refusing:
			f.waitCancelled(r)
		case good:
			mu.Lock()
			answered = append(answered, transferID(rec))
			mu.Unlock()
			answerJSON(f, w, r, rec)
		}
	})
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{refusing, good})
	h.postOK(t)
	if len(refusing.requests()) != 1 || len(good.requests()) != 1 {
		t.Fatalf("refusing %d, good %d: want 1 and 1", len(refusing.requests()), len(good.requests()))
	}
	// The answer came once the second pair's prefill leg was answered; the first
	// pair's, if it reached the engine, is cancelled (its engine sees that a little later).
	mu.Lock()
	got := answered
	mu.Unlock()
	if want := transferID(good.requests()[0]); len(got) != 1 || got[0] != want {
		t.Fatalf("prefill answered the legs of transfers %v, want only the second pair's %v", got, want)
	}
	eventually(t, "the first pair's prefill leg cancelled, if it came", func() bool { return len(pf.cancels()) == len(pf.requests())-1 })
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
			takeIn(w, r) // written to the connection before the close: the proxy reads it first
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
	pf := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		// As in TestPushDecode503FailsOver: the leg of a pair whose decode leg the dying
		// engine hangs up on waits for its cancel; any other is answered.
		switch partner, dr := f.pushPartner(r, rec, dying, other); {
		case partner == dying && transferID(dr) != transferID(dying.requests()[0]):
			f.waitCancelled(r)
		case partner != nil:
			answerJSON(f, w, r, rec)
		}
	})
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{dying, other})
	sent := 0
	for ; len(dying.requests()) < 2 && sent < 20; sent++ {
		h.postOK(t)
	}
	if got := len(dying.requests()); got != 2 {
		t.Fatalf("the dying decode engine got %d requests in %d, want 2", got, sent)
	}
	eventually(t, "the prefill leg of the pair hung up on cancelled, if it came", func() bool { return len(pf.cancels()) == len(pf.requests())-sent })
	if s := h.p.Stats(); s != (Stats{Requests: uint64(sent), Retried: 1, DecodeFailovers: 1}) {
		t.Fatalf("stats %+v, want %d requests, 1 retried, 1 decode failover", s, sent)
	}
}
