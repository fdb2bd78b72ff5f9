package pd

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// One failed health check (a busy host) does not take the only decode
// engine out of rotation: it leaves after DefaultHealthFailures failed
// checks in a row, and comes back after one that passes.
func TestHealthCheckHysteresis(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour}, []*fake{pf}, []*fake{df})
	decode := h.p.pools().decode
	inRotation := func() int { return h.p.inRotationCount(decode) }
	if n := inRotation(); n != 1 {
		t.Fatalf("%d decode engines in rotation at start, want 1", n)
	}
	check := func() { h.p.checkAll(context.Background(), h.p.connector) }

	df.health.Store(http.StatusServiceUnavailable)
	check()
	df.health.Store(0)
	if n := inRotation(); n != 1 {
		t.Fatalf("after one failed check: %d decode engines in rotation, want 1", n)
	}
	h.postOK(t)

	// A success resets the count: two failures, a pass, two failures stay in.
	df.health.Store(http.StatusServiceUnavailable)
	check()
	check()
	df.health.Store(0)
	check()
	df.health.Store(http.StatusServiceUnavailable)
	check()
	check()
	if n := inRotation(); n != 1 {
		t.Fatalf("after 2, pass, 2 failed checks: %d in rotation, want 1", n)
	}
	check()
	if n := inRotation(); n != 0 {
		t.Fatalf("after %d failed checks in a row: %d in rotation, want 0", 3, n)
	}
	df.health.Store(0)
	check()
	if n := inRotation(); n != 1 {
		t.Fatalf("after a passing check: %d in rotation, want 1", n)
	}
}

// hungCheck runs one health check of e that runs out of time: e's fake hangs
// (hangHealth), and the check's deadline is short. The harness's HealthTimeout stays
// generous, so that a check that should pass never times out on a busy machine.
func (h *harness) hungCheck(e *engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	h.p.check(ctx, e, h.p.connector)
}

// A health check that hangs past its timeout counts as one failure, not
// as the engine leaving rotation.
func TestHealthCheckHangsOnce(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour, HealthFailures: 2}, []*fake{pf}, []*fake{df})
	decode := h.p.pools().decode
	check := func() { h.p.checkAll(context.Background(), h.p.connector) }
	df.hangHealth.Store(true)
	h.hungCheck(decode[0])
	if n := h.p.inRotationCount(decode); n != 1 {
		t.Fatalf("after one hung check: %d in rotation, want 1", n)
	}
	h.hungCheck(decode[0])
	if n := h.p.inRotationCount(decode); n != 0 {
		t.Fatalf("after HealthFailures (2) hung checks: %d in rotation, want 0", n)
	}
	df.hangHealth.Store(false)
	check()
	if n := h.p.inRotationCount(decode); n != 1 {
		t.Fatalf("after a passing check: %d in rotation, want 1", n)
	}
}

// An engine reporting the other role is logged once, at error level, not
// at every health check (every second while the proxy waits at start).
func TestWrongRoleLoggedOnce(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	wrong := newFake(t, "prefill", "pull", nil) // given as a decode engine
	core, logs := observer.New(zap.InfoLevel)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour, Logger: zap.New(core)}, []*fake{pf}, []*fake{wrong})
	for range 3 {
		h.p.checkAll(context.Background(), h.p.connector)
	}
	const msg = "engine out of rotation: it reports the other role; check -prefill and -decode"
	if n := logs.FilterMessage(msg).Len(); n != 1 {
		t.Fatalf("%d %q logs after 4 checks, want 1", n, msg)
	}
	if got := h.p.whyNotInRotation(h.p.pools().decode); len(got) != 1 || got[0] != "decode "+wrong.srv.URL+": it reports role \"prefill\"; check -prefill and -decode" {
		t.Fatalf("not in rotation: %q", got)
	}
}

// An engine out of rotation only because its health checks timed out (a
// host too busy to answer GET /health in time, as the README's test command
// found under stress-ng: "HTTP 503: no decode engine in rotation" while
// the engine was serving) still gets requests when no other engine can:
// a late answer beats a 503. One that answers its checks with an error
// does not, nor does one that never passed a check.
func TestSlowEngineServesWhenNoneIsInRotation(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", nil)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour, HealthFailures: 2}, []*fake{pf}, []*fake{df})
	decode := h.p.pools().decode
	check := func() { h.p.checkAll(context.Background(), h.p.connector) }
	df.hangHealth.Store(true)
	h.hungCheck(decode[0])
	h.hungCheck(decode[0])
	if n := h.p.inRotationCount(decode); n != 0 {
		t.Fatalf("after 2 hung checks: %d in rotation, want 0", n)
	}
	df.hangHealth.Store(false) // it answers requests, only its checks were late
	h.postOK(t)

	// A check answered with an error ends it: the engine is out, for real.
	df.health.Store(http.StatusServiceUnavailable)
	check()
	resp := h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "no decode engine in rotation") {
		t.Fatalf("after a check answered 503: status %d: %s", resp.StatusCode, b)
	}
	// And timeouts after that error do not bring it back before a pass.
	df.health.Store(0)
	df.hangHealth.Store(true)
	h.hungCheck(decode[0])
	resp = h.post(t, context.Background(), clientBody, nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("hung checks after a failed one: status %d: %s", resp.StatusCode, b)
	}
	df.hangHealth.Store(false)
	check()
	h.postOK(t)
}
