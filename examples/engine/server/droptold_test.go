package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// A pull prefill shutting down, end to end: a hold whose decode engine is
// coming for it (queued for decode blocks, its KeepAlive asks about the
// hold) is kept and read, bytes verified; a hold nobody asked about is
// dropped after DefaultUnclaimedHold, and the decode leg that comes for it
// meanwhile is told at once that the prefill engine is shutting down; the
// shutdown ends when the kept hold is read, long before its bound.
func TestShutdownKeepsClaimedHoldsAndTellsLateDecodes(t *testing.T) {
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	newAgent := func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }
	core, logs := observer.New(zapcore.InfoLevel)
	mk := func(role, id string, blocks int, compute server.ComputeModel, log *zap.Logger) *server.Server {
		s, err := server.New(server.Config{Role: role, EngineID: id, Model: tiny, NumBlocks: blocks, Lease: time.Minute,
			Compute: compute, NewAgent: newAgent, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pre := mk(server.RolePrefill, "prefill", 64, server.ComputeModel{}, zap.New(core))
	busy := mk(server.RoleDecode, "decode-busy", 8, server.ComputeModel{DecodeBase: 20 * time.Millisecond}, zap.NewNop())
	free := mk(server.RoleDecode, "decode-free", 64, server.ComputeModel{}, zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer busy.Close(ctx)
	defer free.Close(ctx)
	p := &pair{prefill: pre, client: &http.Client{Transport: &http.Transport{}}}
	defer p.client.CloseIdleConnections()
	toks := make([]int, 16)
	for i := range toks {
		toks[i] = i + 1
	}

	// busy's 8 blocks go to a local request for about 2 s.
	local := make(chan int, 1)
	go func() {
		resp, _ := p.post(t, busy.URL(), "local", req(toks, 100))
		local <- resp.StatusCode
	}()
	eventually(t, "busy decode full", func() bool { return busy.Stats().BlocksInUse == 8 })
	remote := func(id string) map[string]any {
		return p.complete(t, pre.URL(), id, with(req(toks, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true})).KVTransferParams
	}
	claimedKV, nobodyKV := remote("claimed"), remote("nobody")
	want := p.complete(t, free.URL(), "reference", req(toks, 4)).Choices[0].Text // served locally

	type answer struct {
		status int
		body   string
	}
	claimed := make(chan answer, 1)
	go func() {
		resp, body := p.post(t, busy.URL(), "claimed", with(req(toks, 4), "kv_transfer_params", claimedKV))
		claimed <- answer{resp.StatusCode, string(body)}
	}()
	eventually(t, "the claimed request queued on busy", func() bool { return busy.Stats().Waiting == 1 })
	time.Sleep(100 * time.Millisecond) // its KeepAlive's hold query binds the hold

	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- pre.Shutdown(ctx, server.ShutdownOptions{HoldDrain: 20 * time.Second}) }()
	eventually(t, "the unclaimed hold dropped", func() bool {
		return logs.FilterMessage("engine closing: dropped holds no decode engine asked about").Len() == 1
	})
	if f := logs.FilterMessage("engine closing: dropped holds no decode engine asked about").All()[0].ContextMap(); f["dropped"] != int64(1) || f["still_held"] != int64(1) {
		t.Errorf("dropped line: %v", f)
	}

	told := time.Now()
	resp, body := p.post(t, free.URL(), "nobody", with(req(toks, 4), "kv_transfer_params", nobodyKV))
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "it dropped the hold: the prefill engine is shutting down") {
		t.Errorf("the late decode leg: %d %s", resp.StatusCode, body)
	}
	if d := time.Since(told); d > time.Second {
		t.Errorf("the late decode leg took %v", d)
	}

	if st := <-local; st != 200 {
		t.Fatalf("local request: %d", st)
	}
	a := <-claimed
	if a.status != 200 || !strings.Contains(a.body, `"text":"`+want+`"`) {
		t.Errorf("the claimed request: %d %s, want the text %q", a.status, a.body, want)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Shutdown took %v: it should end once the claimed hold was read", took)
	}
	if logs.FilterMessage("engine closing: all held blocks read or dropped").Len() != 1 {
		t.Errorf("logs: %v", messages(logs))
	}
	if st := busy.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified == 0 {
		t.Errorf("busy decode stats %+v", st)
	}
}
