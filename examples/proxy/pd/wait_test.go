package pd

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/internal/portpick"
)

// freeAddr returns a 127.0.0.1 address nothing listens on now, for an
// engine that binds it later (portpick: outside the ephemeral range).
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := portpick.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// The proxy started before its engines (connector unknown) waits, logging it, and serves once
// they come up.
func TestStartBeforeEngines(t *testing.T) {
	pa, da := freeAddr(t), freeAddr(t)
	core, logs := observer.New(zap.InfoLevel)
	up := make(chan struct{})
	var listening atomic.Bool
	go func() {
		defer close(up)
		// New finds no engine first: the engines come up once it said it waits.
		deadline := time.Now().Add(time.Minute)
		for logs.FilterMessage("waiting for the engines").Len() == 0 {
			if time.Now().After(deadline) {
				t.Error("New never said it waits for the engines")
				return
			}
			time.Sleep(time.Millisecond)
		}
		listening.Store(true)
		for _, e := range []struct{ addr, role string }{{pa, "prefill"}, {da, "decode"}} {
			ln, err := net.Listen("tcp", e.addr)
			if err != nil {
				t.Error(err)
				return
			}
			newFakeOn(t, ln, e.role, "pull", nil)
		}
	}()
	h := startHarness(t, Config{Prefill: []string{pa}, Decode: []string{da}, StartWait: time.Minute,
		HealthInterval: 50 * time.Millisecond, Logger: zap.New(core)})
	// New returned because the engines came up, not before: they were
	// listening when it did (no measure of time involved).
	if !listening.Load() {
		t.Fatal("New returned before the engines were up")
	}
	<-up
	if c := h.p.Connector(); c != ConnectorPull {
		t.Fatalf("connector %q, want pull (from the engines)", c)
	}
	h.postOK(t)
	if n := logs.FilterMessage("waiting for the engines").Len(); n != 1 {
		t.Errorf("%d \"waiting for the engines\" logs, want 1", n)
	}
	if n := logs.FilterMessage("engines ready").Len(); n != 1 {
		t.Errorf("%d \"engines ready\" logs, want 1", n)
	}
}

// The bounded wait gives up with an error and a log naming every engine and why.
func TestStartWaitGivesUp(t *testing.T) {
	pa, da := freeAddr(t), freeAddr(t)
	core, logs := observer.New(zap.InfoLevel)
	start := time.Now()
	_, err := New(Config{Prefill: []string{pa}, Decode: []string{da}, StartWait: 300 * time.Millisecond,
		HealthInterval: 50 * time.Millisecond, Logger: zap.New(core)})
	// It never gives up early (a busy machine can only make it later).
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("gave up after %s, before the 300 ms wait", waited)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "pd: gave up after 300ms waiting for a prefill and a decode engine that may be paired (not in rotation: prefill http://"+pa+": ") ||
		!strings.Contains(err.Error(), "decode http://"+da+": ") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %v", err)
	}
	gave := logs.FilterMessage("gave up waiting for the engines").All()
	if len(gave) != 1 || gave[0].Level != zap.ErrorLevel {
		t.Fatalf("give-up logs %v, want one at error level", gave)
	}
	if n := len(gave[0].ContextMap()["not_in_rotation"].([]any)); n != 2 {
		t.Fatalf("give-up log names %d engines, want 2", n)
	}
	// Without a wait, as before: at once.
	if _, err := New(Config{Prefill: []string{pa}, Decode: []string{da}}); err == nil || !strings.Contains(err.Error(), "no engine reported one") {
		t.Fatalf("no wait: %v", err)
	}
}
