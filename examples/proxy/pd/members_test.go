package pd

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// member describes fake f as a registry would.
func member(f *fake, compat, incarnation string) Member {
	return Member{Role: f.info.Role, URL: f.srv.URL, EngineID: f.info.EngineID, Incarnation: incarnation,
		Connector: f.info.Connector, CompatHash: compat, Model: "toy", SideChannelHost: f.info.SideChannelHost,
		SideChannelPort: f.info.SideChannelPort, TPSize: f.info.TPSize, PPSize: 1}
}

func dynamicHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	cfg.Dynamic = true
	return startHarness(t, cfg)
}

func (h *harness) postOK(t *testing.T) {
	t.Helper()
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

func TestMembersPairOnlyCompatible(t *testing.T) {
	h := dynamicHarness(t, Config{Connector: "pull", Policy: PolicyLeastOutstanding})
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 503 || !strings.Contains(string(b), "no decode engine in rotation") {
		t.Fatalf("no members: %d %s", resp.StatusCode, b)
	}
	pa := newFake(t, "prefill", "pull", nil)
	pb := newFake(t, "prefill", "pull", nil) // another model geometry
	pc := newFake(t, "prefill", "push", nil) // another connector
	da := newFake(t, "decode", "pull", nil)
	db := newFake(t, "decode", "pull", nil)
	// Only B's pair: it says why nothing can be served.
	h.p.SetMembers([]Member{member(pb, "B", "1"), member(da, "A", "1")})
	resp = h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 503 || !strings.Contains(string(b), "no prefill engine in rotation is compatible") {
		t.Fatalf("incompatible pair: %d %s", resp.StatusCode, b)
	}
	h.p.SetMembers([]Member{member(pa, "A", "1"), member(pb, "B", "1"), member(pc, "A", "1"), member(da, "A", "1")})
	for range 6 {
		h.postOK(t)
	}
	if len(pa.requests()) != 6 || len(pb.requests()) != 0 || len(pc.requests()) != 0 || len(da.requests()) != 6 {
		t.Fatalf("prefill A %d, B %d, push %d, decode %d: want 6, 0, 0, 6",
			len(pa.requests()), len(pb.requests()), len(pc.requests()), len(da.requests()))
	}
	// B's decode arrives: B's prefill may now be paired, and only with it.
	h.p.SetMembers([]Member{member(pa, "A", "1"), member(pb, "B", "1"), member(da, "A", "1"), member(db, "B", "1")})
	for range 6 {
		h.postOK(t)
	}
	if len(pb.requests()) == 0 || len(db.requests()) != len(pb.requests()) || len(da.requests())-6 != len(pa.requests())-6 {
		t.Fatalf("prefill A %d B %d, decode A %d B %d: every request must pair equal hashes",
			len(pa.requests()), len(pb.requests()), len(da.requests()), len(db.requests()))
	}
	for _, rec := range db.requests() {
		if id := rec.body["kv_transfer_params"].(map[string]any)["remote_engine_id"]; id != pb.info.EngineID {
			t.Fatalf("decode B got KV of %v", id)
		}
	}
}

func TestMembersLeaveAndRestart(t *testing.T) {
	h := dynamicHarness(t, Config{Connector: "pull"})
	p1 := newFake(t, "prefill", "pull", nil)
	d1 := newFake(t, "decode", "pull", nil)
	h.p.SetMembers([]Member{member(p1, "A", "1"), member(d1, "A", "1")})
	h.postOK(t)
	// The decode engine restarts under its id on another port: a new incarnation.
	d2 := newFake(t, "decode", "pull", nil)
	m2 := member(d2, "A", "2")
	m2.EngineID = d1.info.EngineID
	h.p.SetMembers([]Member{member(p1, "A", "1"), m2})
	h.postOK(t)
	h.postOK(t)
	if len(d1.requests()) != 1 || len(d2.requests()) != 2 {
		t.Fatalf("old incarnation %d, new %d: want 1, 2", len(d1.requests()), len(d2.requests()))
	}
	// Every decode engine leaves.
	h.p.SetMembers([]Member{member(p1, "A", "1")})
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 503 {
		t.Fatalf("no decode: %d %s", resp.StatusCode, b)
	}
	if len(p1.requests()) != 3 {
		t.Fatalf("prefill got %d requests: it was used with no decode engine to pair", len(p1.requests()))
	}
	// A bad member is skipped.
	bad := member(d2, "A", "3")
	bad.Role = "both"
	h.p.SetMembers([]Member{member(p1, "A", "1"), bad})
	if n := h.p.inRotationCount(h.p.pools().decode); n != 0 {
		t.Fatalf("%d decode engines after a bad member", n)
	}
}

func TestPullDecodeKVFailureRetriedOnAnotherPrefill(t *testing.T) {
	dead := newFake(t, "prefill", "pull", nil)
	good := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		// Decode cannot read from the dead prefill engine's memory.
		if rec.body["kv_transfer_params"].(map[string]any)["remote_engine_id"] == dead.info.EngineID {
			writeJSON(w, 500, map[string]any{"error": map[string]any{"message": "KV transfer failed: remote disconnected", "code": 500}})
			return
		}
		answerJSON(f, w, r, rec)
	})
	h := newHarness(t, Config{Policy: PolicyRoundRobin, HealthInterval: time.Hour}, []*fake{dead, good}, []*fake{df})
	for range 4 {
		h.postOK(t)
	}
	// Round robin, two picks per request, starts every request on the dead one (its HTTP
	// side still answers); each is retried on the other.
	if s := h.p.Stats(); s.Retried != 4 || s.Failed != 0 {
		t.Fatalf("stats %+v, want 4 retried, 0 failed", s)
	}
	if len(dead.requests()) != 4 || len(good.requests()) != 4 || len(df.requests()) != 8 {
		t.Fatalf("dead %d good %d decode %d", len(dead.requests()), len(good.requests()), len(df.requests()))
	}
	// Both prefill engines failing: the client gets decode's error, after one retry.
	bad := newFake(t, "decode", "pull", answer500)
	h2 := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{dead, good}, []*fake{bad})
	resp := h2.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 502 || !strings.Contains(string(b), "engine exploded") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if s := h2.p.Stats(); s.Retried != 1 || s.Failed != 1 || len(bad.requests()) != 2 {
		t.Fatalf("stats %+v, decode got %d", s, len(bad.requests()))
	}
}

func TestPullDecodeUnreachableRetriedWithSameKV(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	gone := newFake(t, "decode", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{gone, df})
	gone.srv.Close()
	// The start's health checks left kept-alive connections to it: one the
	// engine closed while a request was being written on it ends in EOF,
	// which the proxy (rightly) does not take for "never taken in". Gone
	// here means no connection can be made.
	h.p.client.CloseIdleConnections()
	for range 2 {
		h.postOK(t)
	}
	if len(pf.requests()) != 2 || len(df.requests()) != 2 {
		t.Fatalf("prefill %d decode %d: the retry must reuse the prefill", len(pf.requests()), len(df.requests()))
	}
	if s := h.p.Stats(); s.Retried > 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSetMembersNeedsDynamic(t *testing.T) {
	if _, err := New(Config{Dynamic: true}); err == nil || !strings.Contains(err.Error(), "needs Config.Connector") {
		t.Fatalf("Dynamic without connector: %v", err)
	}
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	other := newFake(t, "decode", "pull", nil)
	h.p.SetMembers([]Member{member(other, "A", "1")})
	if n := len(h.p.pools().decode); n != 1 {
		t.Fatalf("a static proxy took a member: %d decode engines", n)
	}
}

func TestPushDecodeUnreachableRetriedOnAnother(t *testing.T) {
	pf := newFake(t, "prefill", "push", nil)
	gone := newFake(t, "decode", "push", nil)
	df := newFake(t, "decode", "push", nil)
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{gone, df})
	gone.srv.Close()
	// The start's health checks left kept-alive connections to it: one the
	// engine closed while a request was being written on it ends in EOF,
	// which the proxy (rightly) does not take for "never taken in". Gone
	// here means no connection can be made.
	h.p.client.CloseIdleConnections()
	for range 2 {
		h.postOK(t)
	}
	if len(df.requests()) != 2 {
		t.Fatalf("decode got %d requests, want 2", len(df.requests()))
	}
	// Round robin picks the closed one first once; it is out of rotation after that. The
	// first pair's prefill leg is cancelled when decode's dial fails: it may not have
	// reached the engine.
	if s := h.p.Stats(); s.Retried != 1 || s.Failed != 0 || len(pf.requests()) < 2 || len(pf.requests()) > 3 {
		t.Fatalf("stats %+v, prefill got %d: want 1 retried, 0 failed, 2 or 3 prefill legs", s, len(pf.requests()))
	}
}

// Push: decode answers 500 before prefill did (its handshake with a prefill engine that just
// died failed): the pair is retried with another prefill engine.
func TestPushDecode5xxRetriedOnAnotherPrefill(t *testing.T) {
	release := make(chan struct{})
	dying := newFake(t, "prefill", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		select { // answers only once decode gave up, if ever
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	good := newFake(t, "prefill", "push", nil)
	df := newFake(t, "decode", "push", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.body["kv_transfer_params"].(map[string]any)["remote_engine_id"] == dying.info.EngineID {
			writeJSON(w, 500, map[string]any{"error": map[string]any{"message": "KV transfer failed: handshake failed: connection refused", "code": 500}})
			return
		}
		answerJSON(f, w, r, rec)
	})
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{dying, good}, []*fake{df})
	for range 2 {
		h.postOK(t)
	}
	// Round robin, two picks per request, starts every request on the dying engine (its
	// HTTP side still answers health checks).
	if s := h.p.Stats(); s.Retried != 2 || s.Failed != 0 {
		t.Fatalf("stats %+v, want 2 retried, 0 failed", s)
	}
	if len(good.requests()) != 2 || len(df.requests()) != 4 {
		t.Fatalf("good prefill %d, decode %d: want 2, 4", len(good.requests()), len(df.requests()))
	}
}
