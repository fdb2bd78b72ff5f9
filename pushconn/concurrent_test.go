package pushconn

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestThousandConcurrentRequests registers and finishes 1000 requests in
// random order from several goroutines, with exact, suffixed and
// transfer-id keys mixed, and checks that every request ends exactly once
// on every decode rank with its bytes intact, and is freed exactly once on
// every prefill rank.
func TestThousandConcurrentRequests(t *testing.T) {
	for _, tc := range []struct{ preTP, decTP int }{{2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("tp%dto%d", tc.preTP, tc.decTP), func(t *testing.T) {
			const n = 1000
			r := newRig(t, rigConfig{preTP: tc.preTP, decTP: tc.decTP, numBlocks: n})
			type req struct {
				decID, preID string
				opts         []requestOption
			}
			reqs := make([]req, n)
			for i := range reqs {
				switch i % 3 {
				case 0:
					reqs[i] = req{decID: fmt.Sprintf("r%d", i), preID: fmt.Sprintf("r%d", i)}
				case 1:
					reqs[i] = req{decID: fmt.Sprintf("r%d-%08x", i, i), preID: fmt.Sprintf("r%d-%08X", i, i*7)}
				default:
					reqs[i] = req{decID: fmt.Sprintf("d%d", i), preID: fmt.Sprintf("p%d", i), opts: []requestOption{withTransferID(fmt.Sprint("t", i))}}
				}
				for _, l := range r.preLayout {
					fill(t, l, []int{i}, i, 16)
				}
			}
			type event struct {
				register bool
				i        int
			}
			var events []event
			for i := range n {
				events = append(events, event{true, i}, event{false, i})
			}
			rng := rand.New(rand.NewPCG(uint64(tc.preTP), 42))
			rng.Shuffle(len(events), func(a, b int) { events[a], events[b] = events[b], events[a] })

			var wg sync.WaitGroup
			const workers = 4
			errs := make(chan error, 2*n*(tc.preTP+tc.decTP))
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := w; k < len(events); k += workers {
						e := events[k]
						rq := reqs[e.i]
						if e.register {
							for _, c := range r.consumers {
								errs <- c.Register(rq.decID, Coordinates(r.pre), []int{e.i}, rq.opts...)
							}
							continue
						}
						for _, p := range r.producers {
							_, err := p.RequestFinished(rq.preID, []int{e.i}, rq.opts...)
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			byID := map[string]int{}
			for i, rq := range reqs {
				byID[rq.decID] = i
			}
			for ci, c := range r.consumers {
				seen := map[string]int{}
				for _, res := range await(t, c, n) {
					require.NoError(t, res.Err, res.RequestID)
					seen[res.RequestID]++
				}
				require.Len(t, seen, n)
				for id, count := range seen {
					require.Equal(t, 1, count, id)
					i := byID[id]
					check(t, r.decLayout[ci], []int{i}, 0, i, 16)
				}
				require.Empty(t, c.Drain())
			}
			for _, p := range r.producers {
				var ids []string
				for _, rq := range reqs {
					ids = append(ids, rq.preID)
				}
				freedOnce(t, p, ids...)
				// Each prefill rank writes into fanout decode ranks.
				fanout := uint64(max(tc.decTP/tc.preTP, 1))
				s := p.Stats()
				require.Equal(t, n*fanout, s.Transfers)
				require.Equal(t, 334*fanout, extra(t, s, "matched_exact"))
				require.Equal(t, 333*fanout, extra(t, s, "matched_stripped"))
				require.Equal(t, 333*fanout, extra(t, s, "matched_transfer_id"))
				require.Zero(t, s.FailedTransfers+s.ExpiredRequests+extra(t, s, "duplicate_registrations"))
				// Every registration's reference to its decode engine ended
				// with it, or MaxPeers could never evict the engine.
				require.NoError(t, p.Close()) // the writer's state is the test's now
				require.Len(t, p.w.core.peers.byKey, 1)
				for _, de := range p.w.core.peers.byKey {
					require.Zero(t, de.refs)
					require.True(t, de.idle())
				}
				require.Zero(t, p.w.core.peers.parked)
			}
		})
	}
}
