package server_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
)

// TestNHD pairs engines of NHD blocks with NHD and HND peers, both
// connectors, TP 2 -> 1 and 1 -> 2: decode verifies every byte (0
// failures, the exact count) and gives the text the prompt gives locally.
// The prefill's hook reads the NHD blocks it filled at the offsets
// docs/kvfill.md states, with vllmpeer's fill (an implementation of that
// page of its own).
func TestNHD(t *testing.T) {
	tokens := vllmpeer.Tokenize(prompt)
	ph := vllmpeer.PrefixHashes(tokens)
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		for _, orders := range [][2]string{{"NHD", "NHD"}, {"NHD", "HND"}, {"HND", "NHD"}} {
			for _, tp := range [][2]int{{2, 1}, {1, 2}} {
				t.Run(fmt.Sprintf("%s/%s-to-%s/tp%d-to-tp%d", conn, orders[0], orders[1], tp[0], tp[1]), func(t *testing.T) {
					var checked atomic.Int64
					hook := func(_ string, rank int, l descriptors.Layout, blocks []int, mem []byte) {
						if descriptors.OrderOf(l.Order) != orders[0] {
							t.Errorf("prefill rank %d layout order %q, want %s", rank, l.Order, orders[0])
							return
						}
						want := make([]byte, l.HeadBytes)
						for region := range l.NumRegions() {
							for tok := range len(tokens) {
								for hh := range l.KVHeads {
									slot := hh*l.BlockSize + tok%l.BlockSize
									if orders[0] == "NHD" {
										slot = (tok%l.BlockSize)*l.KVHeads + hh
									}
									off := region*int(l.RegionLen()) + blocks[tok/l.BlockSize]*int(l.BlockLen()) + slot*l.HeadBytes
									vllmpeer.FillRow(want, ph[tok], region, l.FirstHead()+hh, tok)
									if string(mem[off:off+l.HeadBytes]) != string(want) {
										t.Errorf("prefill rank %d region %d head %d token %d: row at %d is not the fill", rank, region, l.FirstHead()+hh, tok, off)
										return
									}
									checked.Add(1)
								}
							}
						}
					}
					p := newPair(t, conn, opts{prefillTP: tp[0], decodeTP: tp[1], prefillLayout: orders[0], decodeLayout: orders[1], hook: hook})
					want := p.complete(t, p.decode.URL(), "", req(prompt, 5)).Choices[0].Text
					if got := p.disagg(t, "nhd-1", req(prompt, 5)).Choices[0].Text; got != want {
						t.Errorf("text %q, want %q", got, want)
					}
					// 25 tokens in 2 blocks: 4 regions x 4 heads x 32 rows x 16 bytes.
					if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified != 2*4*4*16*16 {
						t.Errorf("decode stats %+v", st)
					}
					if n := checked.Load(); n != int64(4*4*len(tokens)) {
						t.Errorf("the hook checked %d prefill rows, want %d", n, 4*4*len(tokens))
					}
					idle(t, p)
				})
			}
		}
	}
}

func TestKVLayoutRefused(t *testing.T) {
	_, err := server.New(server.Config{Role: server.RolePrefill, Model: tiny, KVLayout: "LBNHC",
		NewAgent: func(string) (nixl.Agent, error) { return nil, nil }})
	if err == nil || !strings.Contains(err.Error(), `engine: Config.KVLayout is "LBNHC", want "HND" or "NHD"`) {
		t.Fatalf("err %v", err)
	}
}
