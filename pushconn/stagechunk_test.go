package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestStagedChunksPipelined: a staged WRITE of n chunks gathers chunk k
// only after chunks 0..k-1 were posted, posts n WRITEs, and decode
// scatters each chunk by itself (n scatters of its regions' bytes); the
// bytes arrive whole, for 1 (PUSH_STAGED), 2, 3 (uneven: 2+1+1 regions)
// and the default (one per region) chunks, in every geometry that maps
// blocks differently.
func TestStagedChunksPipelined(t *testing.T) {
	for _, g := range []struct{ preTP, decTP, preBlock, decBlock int }{{1, 1, 16, 16}, {1, 1, 16, 32}, {2, 1, 16, 16}} {
		for _, chunks := range []int{1, 2, 3, 0} {
			t.Run(fmt.Sprintf("tp%d-%d/bs%d-%d/chunks%d", g.preTP, g.decTP, g.preBlock, g.decBlock, chunks), func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
				pre, dec := map[int]*stagingtest.Copier{}, &stagingtest.Copier{}
				r := stagingRig(t, rigConfig{preTP: g.preTP, decTP: g.decTP, preBlock: g.preBlock, decBlock: g.decBlock}, m)
				// The copiers and the chunk count are set after the rig
				// built its ranks (before any request): the rig's hook
				// cannot see the fabric yet. Prefill alone chooses the count.
				for i, p := range r.producers {
					rc := &stagingtest.Copier{Probe: func() uint64 { return r.fabric.Counters().Posted }}
					pre[i] = rc
					p.cfg.Staging.Copier, p.cfg.Staging.Chunks = rc, chunks
				}
				for _, c := range r.consumers {
					c.cfg.Staging.Copier = dec
				}
				const tokens = 8 * 32
				src := []int{9, 3, 30, 12, 1, 44, 7, 20, 35, 2, 17, 40, 5, 26, 11, 38}[:tokens/g.preBlock]
				dst := []int{5, 40, 7, 22, 13, 31, 2, 18, 27, 9, 36, 1, 24, 15, 42, 33}[:tokens/g.decBlock]
				pushOne(t, r, true, "req", "req", src, dst, tokens)
				n := staging.ChunkCount(2*numLayers, chunks)
				var posted uint64
				for i := range r.producers {
					bytes, probes := pre[i].Record()
					require.Len(t, bytes, n, "prefill rank %d gathers once per chunk", i)
					// Chunk k is gathered once the rank's chunks before it
					// were posted (the ranks share the fabric's count).
					for k := 1; k < n; k++ {
						require.Greater(t, probes[k], probes[k-1], "rank %d: chunk %d gathered after chunk %d was posted", i, k, k-1)
					}
					posted += uint64(n)
				}
				require.Equal(t, posted, r.fabric.Counters().Posted, "one WRITE per chunk")
				bytes, _ := dec.Record()
				require.Len(t, bytes, n*len(r.producers), "decode scatters each chunk by itself")
				im, err := staging.NewDstImage(&r.preLayout[0], &r.decLayout[0], len(dst))
				require.NoError(t, err)
				perRegion := im.Size() / uint64(im.Regions)
				var sum uint64
				for k, b := range bytes {
					require.Zero(t, b%perRegion, "scatter %d is whole regions", k)
					sum += b
				}
				require.Equal(t, im.Size()*uint64(len(r.producers)), sum)
				require.Equal(t, uint64(len(r.producers)), extra(t, r.consumers[0].Stats(), "staged_transfers"), "each rank's part counted once")
			})
		}
	}
}

// TestStagedChunkLost: when one chunk's completion is lost, decode
// scatters the others but never reports the request done: it times out
// once, its blocks are freed once on prefill and both slots come back.
func TestStagedChunkLost(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{}, m)
	dec := &stagingtest.Copier{}
	r.consumers[0].cfg.Staging.Copier = dec
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.DropNotif, From: "prefill-0", Count: 1})
	require.NoError(t, err)
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
	admitted(t, p, 1)
	_, err = p.RequestFinished("x", []int{5, 1})
	require.NoError(t, err)
	eventually(t, "the other chunks scattered", func() bool { b, _ := dec.Record(); return len(b) == rigChunks-1 })
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, c.Drain(), "no result before the lost chunk")
	r.clock.Advance(DefaultRegistrationTimeout + time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	freedOnce(t, p, "x")
	eventually(t, "slots released", func() bool { pre, dec := inUse(r); return pre == 0 && dec == 0 })
	require.Zero(t, extra(t, c.Stats(), "staged_transfers"))
}

// TestStagedChunkNotifsChecked: chunk completions that do not fit the
// part (too many chunks for its regions, a count other than the first
// chunk's, a chunk seen already, an unknown request, another registration's
// seq or none) are counted and change nothing; the request they aimed at
// still ends by its own chunks.
func TestStagedChunkNotifsChecked(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{}, m)
	c, p := r.consumers[0], r.producers[0]
	send := func(msg string) {
		t.Helper()
		require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), []byte(msg), nil))
	}
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
	admitted(t, p, 1)
	seq := regSeq(t, c, "x")
	malformed0, unknown0 := c.Stats().MalformedNotifications, c.Stats().UnknownNotifications
	send(fmt.Sprintf("PUSH_STAGED_CHUNK:0:%d:x:1#%d", rigChunks+1, seq)) // more chunks than regions
	send(fmt.Sprintf("PUSH_STAGED_CHUNK:0:0:x:1#%d", seq))               // no chunk
	send("PUSH_STAGED_CHUNK:0:2:nobody:1")                               // no such request
	send(fmt.Sprintf("PUSH_STAGED_CHUNK:0:%d:x:1#%d", rigChunks, seq-1)) // another registration's
	send(fmt.Sprintf("PUSH_STAGED_CHUNK:0:%d:x:1", rigChunks))           // none
	send(fmt.Sprintf("PUSH_STAGED:x:1#%d", seq+1))
	eventually(t, "bad chunks counted", func() bool {
		s := c.Stats()
		return s.MalformedNotifications == malformed0+2 && s.UnknownNotifications == unknown0+1 && extra(t, s, "stale_completions") == 3
	})
	require.Zero(t, extra(t, c.Stats(), "staging_copied_bytes"), "nothing scattered")
	pre, decSlots := inUse(r)
	require.Equal(t, 0, pre)
	require.Equal(t, 1, decSlots, "the offered slot still held")
	pushOneFinish(t, r, "x", []int{5, 1}, []int{3, 9})
	// A repeat of a chunk after the end: the request is gone.
	before := c.Stats().UnknownNotifications
	send(fmt.Sprintf("PUSH_STAGED_CHUNK:0:%d:x:1#%d", rigChunks, seq))
	eventually(t, "late chunk counted", func() bool { return c.Stats().UnknownNotifications == before+1 })
}

// pushOneFinish finishes a request already registered and checks its
// bytes on decode.
func pushOneFinish(t *testing.T, r *rig, id string, src, dst []int) {
	t.Helper()
	fill(t, r.preLayout[0], src, 7, 32)
	_, err := r.producers[0].RequestFinished(id, src)
	require.NoError(t, err)
	res := await(t, r.consumers[0], 1)
	require.NoError(t, res[0].Err)
	require.Positive(t, check(t, r.decLayout[0], dst, 0, 7, 32))
	freedOnce(t, r.producers[0], id)
}

// TestStagedChunkCountMismatch: a first chunk completion whose count is
// not the one prefill writes fixes the part's count, so the real chunks
// are refused (counted) and the request times out: it never reports done
// with chunks missing.
func TestStagedChunkCountMismatch(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{}, m)
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
	admitted(t, p, 1)
	bogus := fmt.Sprintf("PUSH_STAGED_CHUNK:1:2:x:1#%d", regSeq(t, c, "x"))
	require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), []byte(bogus), nil))
	eventually(t, "bogus chunk scattered", func() bool { return extra(t, c.Stats(), "staging_copied_bytes") > 0 })
	unknown0 := c.Stats().UnknownNotifications
	_, err := p.RequestFinished("x", []int{5, 1})
	require.NoError(t, err)
	eventually(t, "real chunks refused", func() bool { return c.Stats().UnknownNotifications == unknown0+rigChunks })
	r.clock.Advance(DefaultRegistrationTimeout + time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	freedOnce(t, p, "x")
}

// TestStagedChunkGatherFails: when the gather of a later chunk fails, the
// chunks already posted end first; then decode hears PUSH_FAIL, prefill
// frees the blocks once and both slots come back.
func TestStagedChunkGatherFails(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{}, m)
	r.producers[0].cfg.Staging.Copier = &stagingtest.Copier{FailAt: 3}
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
	admitted(t, p, 1)
	_, err := p.RequestFinished("x", []int{5, 1})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "transfer"), "err = %v", res[0].Err)
	require.ErrorContains(t, res[0].Err, "gather chunk 2 of 4")
	freedOnce(t, p, "x")
	eventually(t, "slots released", func() bool { pre, dec := inUse(r); return pre == 0 && dec == 0 })
	require.Equal(t, uint64(1), extra(t, p.Stats(), "staging_failures"))
}

var _ nixl.Agent = (*sendHook)(nil)

// regSeq returns the registration_seq of consumer c's live request id.
func regSeq(t testing.TB, c *Consumer, id string) uint64 {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.tracker.reqs[id]
	require.NotNil(t, r, "request %q is not live", id)
	require.NotZero(t, r.seq)
	return r.seq
}

// TestStagedChunkScatterFailsWhileChunksMove: a chunk whose scatter fails
// while the rank's other chunks may still be moving into decode's slot
// fails the request with the rank still expected: the request drains
// (PUSH_CANCEL) and its slot is not handed on until prefill answered, so
// no later chunk of it can land in another request's slot.
func TestStagedChunkScatterFailsWhileChunksMove(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{}, m)
	c, p := r.consumers[0], r.producers[0]
	c.cfg.Staging.Copier = &stagingtest.Copier{FailAt: 1}
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
	admitted(t, p, 1)
	// Chunk 0's completion, before prefill wrote anything: the rank's other
	// chunks are still to come.
	first := fmt.Sprintf("PUSH_STAGED_CHUNK:0:%d:x:1#%d", rigChunks, regSeq(t, c, "x"))
	require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), []byte(first), nil))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, errStaging)
	require.ErrorContains(t, res[0].Err, fmt.Sprintf("chunk 0 of %d", rigChunks))
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_ack_received"), "the result waited for prefill's answer to the cancel")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "staging_failures"))
	eventually(t, "slots released", func() bool { pre, dec := inUse(r); return pre == 0 && dec == 0 })
	require.Empty(t, p.DrainFreed(), "prefill held no block of x (it never finished)")
}
