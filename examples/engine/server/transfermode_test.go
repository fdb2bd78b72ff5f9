package server_test

import (
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// A prefill leg without transfer_mode, as vLLM's proxies send it to pull and
// push engines alike ({"do_remote_decode": true}), is the engine's own
// connector's: a push prefill serves it (it answered 400 "transfer_mode is
// pull" before) and its Params name push.
func TestPrefillLegWithoutTransferMode(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{})
			pre := with(with(req("hello there", 4), "max_tokens", 1), "kv_transfer_params", map[string]any{"do_remote_decode": true})
			kv := p.complete(t, p.prefill.URL(), "no-mode", pre).KVTransferParams
			if kv["transfer_mode"] != conn {
				t.Fatalf("prefill's params %v, want transfer_mode %q", kv, conn)
			}
		})
	}
}
