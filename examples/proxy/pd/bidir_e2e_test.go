package pd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Multi-turn chats through the proxy with bidirectional KV: from turn 2 on,
// prefill reads the conversation's history back from the decode engine
// that holds it, every byte checked, and the answers are those of the
// history recomputed.
func TestBidirectionalChats(t *testing.T) {
	model := server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 4, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}
	answers := map[bool][]string{}
	for _, bidir := range []bool{true, false} {
		fab, err := loopback.NewFabric()
		if err != nil {
			t.Fatal(err)
		}
		var engines []*server.Server
		mk := func(role, id string) *server.Server {
			s, err := server.New(server.Config{Role: role, Connector: "pull", EngineID: id, Model: model, NumBlocks: 256, Bidirectional: bidir,
				RecomputeThreshold: 16, NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
			if err != nil {
				t.Fatal(err)
			}
			engines = append(engines, s)
			return s
		}
		pre, d1, d2 := mk(server.RolePrefill, "p"), mk(server.RoleDecode, "d1"), mk(server.RoleDecode, "d2")
		p, err := pd.New(pd.Config{Prefill: []string{pre.URL()}, Decode: []string{d1.URL(), d2.URL()}, Bidirectional: bidir, HealthInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(p)
		ctx := context.Background()
		for c := range 3 {
			var hist []completions.Message
			for turn := range 3 {
				hist = append(hist, completions.Message{Role: "user", Content: fmt.Sprintf("conversation %d turn %d asks about the quick brown fox and the lazy dog again", c, turn)})
				s := completions.StreamChat(ctx, http.DefaultClient, front.URL, "tiny", fmt.Sprintf("c%d-t%d", c, turn), hist, 0, 6)
				if s.Err != nil {
					t.Fatalf("bidirectional %v, conversation %d turn %d: %v", bidir, c, turn, s.Err)
				}
				answers[bidir] = append(answers[bidir], s.Text)
				hist = append(hist, completions.Message{Role: "assistant", Content: s.Text})
			}
		}
		ps := pre.Stats()
		var bad uint64
		for _, e := range engines {
			bad += e.Stats().KVVerifyFailures
		}
		switch {
		case bad != 0:
			t.Errorf("bidirectional %v: %d KV mismatches", bidir, bad)
		case bidir && (ps.HistoryTokensRead == 0 || ps.HistoryTokensRecomputed != 0):
			t.Errorf("prefill %+v: want every turn after the first to read its history back", ps)
		case !bidir && ps.HistoryTokensRead != 0:
			t.Errorf("prefill %+v: read history back without bidirectional KV", ps)
		}
		front.Close()
		p.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, s := range engines {
			if err := s.Close(cctx); err != nil {
				t.Error(err)
			}
		}
		cancel()
		fab.Close()
	}
	for i := range answers[true] {
		if answers[true][i] != answers[false][i] {
			t.Fatalf("turn %d answered %q with the history read back, %q recomputed", i, answers[true][i], answers[false][i])
		}
	}
}
