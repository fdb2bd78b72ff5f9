package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A prefill engine holding blocks for a decode that never reads them shuts
// down within its hold bound, not its lease, and says what it waited for.
func TestShutdownDoesNotSitOutUnreadHolds(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			fab, err := loopback.NewFabric()
			if err != nil {
				t.Fatal(err)
			}
			defer fab.Close()
			core, logs := observer.New(zapcore.InfoLevel)
			s, err := server.New(server.Config{Role: server.RolePrefill, Connector: conn, EngineID: "prefill", Model: tiny,
				NumBlocks: 64, Lease: time.Minute, Logger: zap.New(core),
				NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
			if err != nil {
				t.Fatal(err)
			}
			p := &pair{prefill: s, client: &http.Client{Transport: &http.Transport{}}}
			defer p.client.CloseIdleConnections()
			for _, id := range []string{"held-1", "held-2"} {
				params := map[string]any{"do_remote_decode": true}
				if conn == server.ConnPush {
					// No decode registers for the transfer: the blocks
					// wait for one just the same.
					params = map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": "xfer-" + id}
				}
				p.complete(t, s.URL(), id, with(req(prompt, 1), "kv_transfer_params", params))
			}
			eventually(t, "prefill holding the blocks", func() bool { return s.Stats().BlocksInUse > 0 })

			const holdDrain = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			if err := s.Shutdown(ctx, server.ShutdownOptions{HoldDrain: holdDrain}); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			// At least the hold bound, and not the lease (1 m) nor the drain
			// deadline (30 s): the upper bound is the rule, not the machine's
			// speed.
			if took < holdDrain || took >= 20*time.Second {
				t.Errorf("Shutdown took %v, want the hold bound %v, not the lease (1m) or the drain (30s)", took, holdDrain)
			}
			if st := s.Stats(); st.BlocksInUse != 0 {
				t.Errorf("blocks in use after Shutdown: %+v", st)
			}

			waiting := logs.FilterMessage("engine closing: waiting for decode engines to read the blocks held for them").All()
			if len(waiting) != 1 {
				t.Fatalf("no waiting line; logs: %v", messages(logs))
			}
			f := waiting[0].ContextMap()
			if f["held_requests"] != int64(2) || f["bound"] != holdDrain || f["lease"] != time.Minute ||
				(conn == server.ConnPull) != (f["unclaimed_dropped_after"] == server.DefaultUnclaimedHold) {
				t.Errorf("waiting line fields: %v", f)
			}
			if conn == server.ConnPull {
				// Pull drops them, and decode engines that come for them are told.
				passed := logs.FilterMessage("engine closing: bound passed, dropped the holds no decode engine is reading; decode engines that come for them are told").All()
				if len(passed) != 1 || passed[0].ContextMap()["dropped"] != int64(2) || passed[0].ContextMap()["being_read"] != int64(0) {
					t.Errorf("no dropped line with the counts; logs: %v", messages(logs))
				}
			} else {
				passed := logs.FilterMessage("engine closing: bound passed, releasing what is still held").All()
				if len(passed) != 1 || passed[0].ContextMap()["held_requests"] != int64(2) {
					t.Errorf("no bound-passed line with the count; logs: %v", messages(logs))
				}
			}
			if logs.FilterMessage("engine closing: no requests in flight").Len() != 1 || logs.FilterMessage("engine closed").Len() != 1 {
				t.Errorf("logs: %v", messages(logs))
			}
		})
	}
}

// A cancelled ctx (a second signal) skips the hold wait altogether.
func TestShutdownCancelledReleasesAtOnce(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	p.complete(t, p.prefill.URL(), "held", with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}))
	eventually(t, "prefill holding the blocks", func() bool { return p.prefill.Stats().BlocksInUse > 0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	p.prefill.Shutdown(ctx, server.ShutdownOptions{HoldDrain: time.Minute})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("cancelled Shutdown took %v", took)
	}
	if st := p.prefill.Stats(); st.BlocksInUse != 0 {
		t.Errorf("blocks in use after Shutdown: %+v", st)
	}
}

func messages(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Message)
	}
	return out
}

// A pull prefill shutting down does not wait its hold bound, let alone its
// lease, for holds no decode engine asked about: it drops them once they
// are DefaultUnclaimedHold old, says so, and exits. A decode engine that
// comes for one afterwards fails at once with an error that says the
// prefill engine is gone.
func TestShutdownDropsUnclaimedHolds(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	newAgent := func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }
	pre, err := server.New(server.Config{Role: server.RolePrefill, EngineID: "prefill", Model: tiny, NumBlocks: 64, Lease: time.Minute,
		Logger: zap.New(core), NewAgent: newAgent})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := server.New(server.Config{Role: server.RoleDecode, EngineID: "decode", Model: tiny, NumBlocks: 64, NewAgent: newAgent})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close(context.Background())
	p := &pair{prefill: pre, decode: dec, client: &http.Client{Transport: &http.Transport{}}}
	defer p.client.CloseIdleConnections()
	made := time.Now() // before the hold exists: its age at the drop is at most time.Since(made)
	answer := p.complete(t, pre.URL(), "nobody", with(req(prompt, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}))
	eventually(t, "prefill holding the blocks", func() bool { return pre.Stats().BlocksInUse > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := pre.Shutdown(ctx, server.ShutdownOptions{HoldDrain: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Not before the hold was DefaultUnclaimedHold old, and without waiting
	// for the hold bound (20 s) or the lease (1 m). Both bounds are the
	// engine's rules, not the machine's speed: the hold was made between
	// made and start.
	if age := time.Since(made); age < server.DefaultUnclaimedHold {
		t.Errorf("Shutdown dropped the hold %v after the request began, before it was %v old", age, server.DefaultUnclaimedHold)
	}
	if took := time.Since(start); took >= 20*time.Second {
		t.Errorf("Shutdown took %v: it waited for the hold bound (20s) instead of dropping the unclaimed hold after %v", took, server.DefaultUnclaimedHold)
	}
	dropped := logs.FilterMessage("engine closing: dropped holds no decode engine asked about").All()
	if len(dropped) != 1 || dropped[0].ContextMap()["dropped"] != int64(1) || dropped[0].ContextMap()["still_held"] != int64(0) {
		t.Errorf("no dropped line with the count; logs: %v", messages(logs))
	}
	if logs.FilterMessage("engine closing: all held blocks read or dropped").Len() != 1 {
		t.Errorf("logs: %v", messages(logs))
	}
	if st := pre.Stats(); st.BlocksInUse != 0 {
		t.Errorf("blocks in use after Shutdown: %+v", st)
	}

	// The decode leg that comes late is told at once.
	start = time.Now()
	resp, body := p.post(t, dec.URL(), "late", with(req(prompt, 4), "kv_transfer_params", answer.KVTransferParams))
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "the prefill engine shut down, or has not started") {
		t.Errorf("late decode leg: %d %s", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("late decode leg took %v", took)
	}
}

// A push prefill shutting down with a decode engine's registration pending
// (decode's blocks wait for a WRITE that will not come) tells that decode
// engine: its request fails at once, saying the prefill rank closed, and
// does not wait for the registration timeout.
func TestPushShutdownTellsPendingRegistrations(t *testing.T) {
	p := newPair(t, server.ConnPush, opts{})
	info := p.prefill.Info()
	kv := map[string]any{"do_remote_prefill": true, "remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost,
		"remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": 1, "transfer_mode": "push", "transfer_id": "t-pending"}
	type answer struct {
		resp *http.Response
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		resp, body := p.post(t, p.decode.URL(), "pending-1", with(req(prompt, 4), "kv_transfer_params", kv))
		done <- answer{resp, body}
	}()
	eventually(t, "decode's registration pending", func() bool { return p.decode.Stats().BlocksInUse > 0 })
	time.Sleep(50 * time.Millisecond) // the PUSH_REG reaches prefill's rank
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.prefill.Shutdown(ctx, server.ShutdownOptions{HoldDrain: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(a.body), "prefill rank closed") {
			t.Errorf("decode's answer: %d %s", a.resp.StatusCode, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("decode still waits 5s after the prefill engine closed")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown and decode's failure took %v", took)
	}
}
