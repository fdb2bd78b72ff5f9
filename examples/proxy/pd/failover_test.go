package pd

import (
	"context"
	"net/http"
	"reflect"
	"strings"
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
