package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

func words(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(w, " ")
}

// turn runs one turn through both engines as the proxy does with
// bidirectional KV: hist (decode's Params of the turn before, or nil) on
// the prefill leg, kv_history_export on the decode leg.
func (p *pair) turn(t *testing.T, id string, body, hist map[string]any) completion {
	t.Helper()
	pre := with(with(with(body, "max_tokens", 1), "stream", false), "kv_transfer_params", map[string]any{"do_remote_decode": true})
	if hist != nil {
		pre = with(pre, "kv_history_params", hist)
	}
	pc := p.complete(t, p.prefill.URL(), id, pre)
	return p.complete(t, p.decode.URL(), id, with(with(body, "kv_transfer_params", pc.KVTransferParams), "kv_history_export", true))
}

// Turn 2 of a conversation reads turn 1's prompt back from decode: prefill
// computes only the rest, every byte read back is checked, and decode's
// hold ends with the read.
func TestBidirectionalTurns(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{bidir: true})
	turn1 := words("a", 100) // 6 full blocks of 16: 96 tokens held
	d1 := p.turn(t, "c1-t1", req(turn1, 4), nil)
	hp := d1.KVTransferParams
	if hp == nil || hp["num_tokens"] != float64(96) || hp["remote_engine_id"] != "decode" {
		t.Fatalf("decode's history params: %v", hp)
	}
	// The answer is out before decode settles the request's blocks (the
	// 7th, partial, goes back then): wait for the state, not for a time.
	eventually(t, "decode after turn 1 holding 6 blocks of 1 exported turn", func() bool {
		st := p.decode.Stats()
		return st.HistoryExported == 1 && st.BlocksInUse == 6 && st.Running == 0
	})
	turn2 := turn1 + " " + words("b", 30)
	d2 := p.turn(t, "c1-t2", req(turn2, 4), hp)
	local := p.complete(t, p.prefill.URL(), "", req(turn2, 4)) // the same prompt, computed whole
	if d2.Choices[0].Text != local.Choices[0].Text {
		t.Errorf("turn 2 answered %q, the whole prompt computed locally %q", d2.Choices[0].Text, local.Choices[0].Text)
	}
	ps, ds := p.prefill.Stats(), p.decode.Stats()
	if ps.HistoryTokensRead != 96 || ps.HistoryTokensRecomputed != 0 || ps.KVVerifyFailures+ds.KVVerifyFailures != 0 || ds.HistoryExported != 2 {
		t.Fatalf("prefill %+v decode %+v: want 96 history tokens read back, none recomputed, no mismatch", ps, ds)
	}
	// Turn 1's blocks are freed by the read; turn 2's 8 full blocks wait
	// for a turn 3 (until the TTL, or Close).
	held(t, p, 8)
}

// A history the prompt does not start with is caught by the byte check and
// recomputed; one shorter than the threshold is not read.
func TestBidirectionalWrongOrShortHistory(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{bidir: true})
	d1 := p.turn(t, "c1-t1", req(words("a", 100), 2), nil)
	p.turn(t, "c1-t2", req(words("z", 130), 2), d1.KVTransferParams) // not turn 1's continuation
	ps := p.prefill.Stats()
	if ps.HistoryTokensRead != 0 || ps.HistoryTokensRecomputed != 96 || ps.KVVerifyFailures != 1 {
		t.Fatalf("prefill %+v: want the 96 tokens read, found wrong and recomputed", ps)
	}
	if ds := p.decode.Stats(); ds.KVVerifyFailures != 0 {
		t.Fatalf("decode %+v: the recomputed prompt must load intact", ds)
	}
	d3 := p.turn(t, "c2-t1", req(words("s", 40), 2), nil) // 2 blocks: 32 < 64
	p.turn(t, "c2-t2", req(words("s", 40)+" more", 2), d3.KVTransferParams)
	if ps := p.prefill.Stats(); ps.HistoryTokensRecomputed != 96+32 {
		t.Fatalf("prefill %+v: want the 32-token history below the threshold recomputed", ps)
	}
	// Both turn 1 holds ended with prefill's completion (a read found
	// wrong, a history below the threshold): only the turn 2 exports stay,
	// 8 + 2 blocks.
	held(t, p, 10)
}

func TestBidirectionalRefusals(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	resp, out := p.post(t, p.prefill.URL(), "", with(with(req("x y", 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}), "kv_history_export", true))
	if resp.StatusCode != 400 || !strings.Contains(string(out), "kv_history_export") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	resp, out = p.post(t, p.prefill.URL(), "", with(with(req("x y", 1), "kv_transfer_params", map[string]any{"do_remote_decode": true}), "kv_history_params", map[string]any{"do_remote_prefill": true}))
	if resp.StatusCode != 400 || !strings.Contains(string(out), "kv_history_params") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
}

// held waits until prefill holds nothing and decode holds exactly n blocks.
func held(t *testing.T, p *pair, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("prefill idle, decode holding %d blocks", n), func() bool {
		return p.prefill.Stats().BlocksInUse == 0 && p.decode.Stats().BlocksInUse == n
	})
}
