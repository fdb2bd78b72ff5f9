package pushconn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stagingMem allocates staging slots for the ranks of a rig: its rank
// hook gives every rank slots of its own. The buffers are freed after the
// rig closed (the cleanup is registered before newRig's).
type stagingMem struct {
	t      testing.TB
	mode   connector.StagingMode
	slots  int
	bytes  uint64
	copier func(side string) connector.Copier // nil: host copy
	bufs   []*nixl.Buffer
	pools  map[string]func() int // "prefill-0" -> in-use slots
}

func newStagingMem(t testing.TB, mode connector.StagingMode, slots int, bytes uint64) *stagingMem {
	m := &stagingMem{t: t, mode: mode, slots: slots, bytes: bytes, pools: map[string]func() int{}}
	t.Cleanup(func() {
		for _, b := range m.bufs {
			_ = b.Free()
		}
	})
	return m
}

func (m *stagingMem) rank(side string) func(*Config) {
	return func(c *Config) {
		buf, err := nixl.AllocBuffer(int(m.bytes) * m.slots)
		require.NoError(m.t, err)
		m.bufs = append(m.bufs, buf)
		c.Staging = connector.Staging{Mode: m.mode, Mem: nixl.DRAM, Base: buf.Addr(), SlotBytes: m.bytes, Slots: m.slots,
			DescCost: 6 * time.Microsecond, CopyBandwidth: 1e9, Chunks: rigChunks}
		if m.copier != nil {
			c.Staging.Copier = m.copier(side)
		}
	}
}

// inUse returns the staging slots held on every rank of the rig.
func inUse(r *rig) (pre, dec int) {
	for _, p := range r.producers {
		if p.pool != nil {
			pre += p.pool.InUse()
		}
	}
	for _, c := range r.consumers {
		c.mu.Lock()
		if c.pool != nil {
			dec += c.pool.InUse()
		}
		c.mu.Unlock()
	}
	return pre, dec
}

func stagingRig(t *testing.T, rc rigConfig, m *stagingMem) *rig {
	rc.preRank, rc.decRank = m.rank("prefill"), m.rank("decode")
	return newRig(t, rc)
}

func fragmented(rng *rand.Rand, n int) []int { return rng.Perm(numBlocks)[:n] }

// partly returns n blocks in runs of 2 to 4.
func partly(rng *rand.Rand, n int) []int {
	var out []int
	for _, start := range rng.Perm(numBlocks / 4) {
		for i := range 2 + rng.IntN(3) {
			if len(out) < n {
				out = append(out, start*4+i%4)
			}
		}
	}
	return out[:n]
}

// TestStagedPushBytes: every geometry, fragmented, partly fragmented or
// contiguous, with staging on, off and chosen by the model: decode's
// blocks hold prefill's bytes, and the counters say which path each WRITE
// took; no slot stays held.
func TestStagedPushBytes(t *testing.T) {
	geoms := []struct{ preTP, decTP, preBlock, decBlock int }{
		{1, 1, 16, 16}, {2, 1, 16, 16}, {1, 2, 16, 16}, {1, 1, 16, 32}, {1, 1, 32, 16}, {2, 1, 16, 32},
	}
	for _, g := range geoms {
		for _, layout := range []string{"fragmented", "partly", "contiguous"} {
			for _, mode := range []connector.StagingMode{connector.StagingOn, connector.StagingOff, connector.StagingAuto} {
				name := fmt.Sprintf("tp%d-%d/bs%d-%d/%s/%s", g.preTP, g.decTP, g.preBlock, g.decBlock, layout, cmpOr(string(mode), "off"))
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(len(name)), 3))
					m := newStagingMem(t, mode, 2, 64<<10)
					r := stagingRig(t, rigConfig{preTP: g.preTP, decTP: g.decTP, preBlock: g.preBlock, decBlock: g.decBlock}, m)
					const tokens = 8 * 32
					nSrc, nDst := tokens/g.preBlock, tokens/g.decBlock
					var src, dst []int
					switch layout {
					case "fragmented":
						src, dst = fragmented(rng, nSrc), fragmented(rng, nDst)
					case "partly":
						src, dst = partly(rng, nSrc), partly(rng, nDst)
					default:
						src, dst = blocksFrom(1, nSrc), blocksFrom(20, nDst)
					}
					pushOne(t, r, true, "req", "req", src, dst, tokens)
					var staged, direct uint64
					for _, p := range r.producers {
						s := p.Stats()
						if mode == connector.StagingOff {
							_, ok := s.Get("staged_transfers")
							require.False(t, ok, "no staging counters without staging")
							continue
						}
						staged += extra(t, s, "staged_transfers")
						direct += extra(t, s, "direct_transfers")
					}
					writes := uint64(max(g.preTP, g.decTP))
					switch {
					case mode == connector.StagingOn:
						require.Equal(t, writes, staged, "every WRITE staged")
						require.Zero(t, direct)
					case mode == connector.StagingAuto && layout == "fragmented":
						require.Equal(t, writes, staged, "the model stages fragmented blocks")
					case mode == connector.StagingAuto && layout == "contiguous" && g.preTP == g.decTP && g.preBlock == g.decBlock:
						// (With other geometries even contiguous blocks
						// need a descriptor per block and head slice.)
						require.Equal(t, writes, direct, "the model writes contiguous blocks directly")
					}
					if mode != connector.StagingOff {
						var decStaged uint64
						for _, c := range r.consumers {
							decStaged += extra(t, c.Stats(), "staged_transfers")
						}
						require.Equal(t, staged, decStaged, "decode scattered every staged part")
					}
					pre, dec := inUse(r)
					require.Zero(t, pre, "prefill slots released")
					require.Zero(t, dec, "decode slots released")
				})
			}
		}
	}
}

// rigChunks is how many chunks a staged WRITE of the rig's layouts (4
// regions) is cut into: one per region, set on every staging rank (the
// default, staging.DefaultChunks, is 2), so that each chunk is a region.
const rigChunks = 2 * numLayers

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// TestStagedSlotHeldUntilWriteEnds: a staged WRITE keeps its prefill slot
// (and decode's) while in flight; a second request meanwhile finds no
// free slot and is written directly; the slots come back only once the
// WRITE and the scatter ended.
func TestStagedSlotHeldUntilWriteEnds(t *testing.T) {
	fc := connector.NewManualClock(rigStart)
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	r := stagingRig(t, rigConfig{fabric: []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(4096.0, 0))}}, m) // 4 KiB a second of fabric time
	fab := r.fabric
	c, p := r.consumers[0], r.producers[0]
	rng := rand.New(rand.NewPCG(1, 2))
	srcA, dstA := fragmented(rng, 4), []int{40, 42, 44, 46}
	srcB, dstB := []int{50, 52}, []int{60, 62}
	fill(t, r.preLayout[0], srcA, 1, 64)
	require.NoError(t, c.Register("a", Coordinates(r.pre), dstA))
	admitted(t, p, 1)
	_, err := p.RequestFinished("a", srcA)
	require.NoError(t, err)
	eventually(t, "WRITE a posted", func() bool { return fab.Counters().Posted == rigChunks })
	pre, dec := inUse(r)
	require.Equal(t, 1, pre, "prefill slot held while the WRITE is in flight")
	require.Equal(t, 1, dec, "decode slot held while the WRITE is in flight")

	fill(t, r.preLayout[0], srcB, 2, 32)
	require.NoError(t, c.Register("b", Coordinates(r.pre), dstB))
	admitted(t, p, 2)
	_, err = p.RequestFinished("b", srcB)
	require.NoError(t, err)
	eventually(t, "WRITE b posted", func() bool { return fab.Counters().Posted == rigChunks+1 })
	require.Equal(t, uint64(1), extra(t, c.Stats(), "staging_no_slot"), "b found decode's only slot taken")
	fc.Advance(time.Hour)
	res := await(t, c, 2)
	for _, x := range res {
		require.NoError(t, x.Err)
	}
	check(t, r.decLayout[0], dstA, 0, 1, 64)
	check(t, r.decLayout[0], dstB, 0, 2, 32)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "staged_transfers"))
	require.Equal(t, uint64(1), extra(t, p.Stats(), "direct_transfers"))
	freedOnce(t, p, "a", "b")
	pre, dec = inUse(r)
	require.Zero(t, pre)
	require.Zero(t, dec)
}

// TestStagedFailures: a failed gather, transfer or scatter fails the
// request (a gather or transfer failure reaches decode as PUSH_FAIL), and
// every slot comes back; the next request goes through.
func TestStagedFailures(t *testing.T) {
	for _, step := range []string{"gather", "transfer", "scatter"} {
		t.Run(step, func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
			bad := map[string]connector.Copier{}
			if step == "gather" {
				bad["prefill"] = &stagingtest.Copier{FailAt: 1}
			}
			if step == "scatter" {
				bad["decode"] = &stagingtest.Copier{FailAt: 1}
			}
			m.copier = func(side string) connector.Copier {
				if c := bad[side]; c != nil {
					return c
				}
				return staging.HostCopier{}
			}
			r := stagingRig(t, rigConfig{}, m)
			if step == "transfer" {
				_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "prefill-0", Count: 1})
				require.NoError(t, err)
			}
			c, p := r.consumers[0], r.producers[0]
			require.NoError(t, c.Register("x", Coordinates(r.pre), []int{3, 9}))
			admitted(t, p, 1)
			_, err := p.RequestFinished("x", []int{5, 1})
			require.NoError(t, err)
			res := await(t, c, 1)
			switch step {
			case "scatter":
				require.ErrorIs(t, res[0].Err, connector.ErrStaging)
			default:
				require.True(t, isPushFail(res[0].Err, "transfer"), "err = %v", res[0].Err)
			}
			freedOnce(t, p, "x")
			if step != "transfer" {
				require.Equal(t, uint64(1), extra(t, c.Stats(), "staging_failures")+extra(t, p.Stats(), "staging_failures"),
					"decode %d, prefill %d", extra(t, c.Stats(), "staging_failures"), extra(t, p.Stats(), "staging_failures"))
			}
			pre, dec := inUse(r)
			require.Zero(t, pre, "prefill slot released")
			require.Zero(t, dec, "decode slot released")
			// The next request goes through the slots again.
			before := extra(t, c.Stats(), "staged_transfers")
			pushOne(t, r, true, "y", "y", []int{7, 2}, []int{11, 4}, 32)
			require.Equal(t, before+1, extra(t, c.Stats(), "staged_transfers"))
		})
	}
}

// TestStagedClose: closing both sides while a staged WRITE is in flight
// ends the request once, frees its blocks once and every slot.
func TestStagedClose(t *testing.T) {
	fc := connector.NewManualClock(rigStart)
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	r := stagingRig(t, rigConfig{fabric: []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(1, 0))}}, m) // never, on a clock that stands still
	fab := r.fabric
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("z", Coordinates(r.pre), []int{8, 3}))
	admitted(t, p, 1)
	_, err := p.RequestFinished("z", []int{6, 2})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return fab.Counters().Posted == rigChunks })
	require.NoError(t, p.Close())
	require.NoError(t, c.Close())
	res := await(t, c, 1)
	require.Error(t, res[0].Err)
	freedOnce(t, p, "z")
	pre, dec := inUse(r)
	require.Zero(t, pre)
	require.Zero(t, dec)
}

// TestStagingConfigRefused: a staging configuration that cannot work is
// refused with an error naming the field, and nothing is registered.
func TestStagingConfigRefused(t *testing.T) {
	r := newRig(t, rigConfig{noProducers: true})
	a, err := r.fabric.NewAgent("extra")
	require.NoError(t, err)
	l := testLayout(t, 1, 0, 16, numBlocks)
	defer freeLayout(l)
	for _, tc := range []struct {
		st   connector.Staging
		want string
	}{
		{connector.Staging{Mode: "sometimes", Base: 1, SlotBytes: 16, Slots: 1}, "Mode"},
		{connector.Staging{Mode: connector.StagingOn, Base: 0, SlotBytes: 16, Slots: 1}, "Base is 0"},
		{connector.Staging{Mode: connector.StagingOn, Base: 16, SlotBytes: 10, Slots: 1}, "SlotBytes is 10"},
		{connector.Staging{Mode: connector.StagingOn, Base: 16, SlotBytes: 16, Slots: 0}, "Slots is 0"},
		{connector.Staging{Mode: connector.StagingOn, Mem: nixl.VRAM, Base: 16, SlotBytes: 16, Slots: 1}, "Mem is VRAM"},
	} {
		_, err := NewProducer(r.pre, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Staging: tc.st}})
		require.ErrorIs(t, err, connector.ErrInvalid)
		require.ErrorContains(t, err, "RankConfig.Staging")
		require.ErrorContains(t, err, tc.want)
	}
}

// TestStagedWriteChunked: with TransferChunk the staged WRITE is several
// descriptors, and the bytes are the same.
func TestStagedWriteChunked(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	r := newRig(t, rigConfig{
		preRank: func(c *Config) { m.rank("prefill")(c); c.Staging.TransferChunk = 4096 },
		decRank: m.rank("decode"),
	})
	pushOne(t, r, true, "c", "c", []int{9, 3, 30, 12}, []int{5, 40, 7, 22}, 64)
	ps := r.producers[0].Stats()
	require.Equal(t, uint64(1), extra(t, ps, "staged_transfers"))
	require.Equal(t, uint64(4), ps.Descriptors, "16 KiB image in 4 KiB descriptors")
}

// TestStagedNHDDecodeAcrossTP: an NHD decode across TP sizes holds a
// prefill rank's heads in one run per token, which a push image (a run per
// block) cannot name, so both prefill ranks write directly, every byte
// checked. (A single-group WRITE maps whole blocks, so PlanWrite's range
// check refused these before too, after taking a slot; the image now
// refuses them first. For grouped requests, mapped by tokens, the refusal
// is what keeps wrong bytes out: TestGroupsPushStaged.)
func TestStagedNHDDecodeAcrossTP(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	r := stagingRig(t, rigConfig{preTP: 2, decTP: 1, decOrder: descriptors.OrderNHD}, m)
	for i, tokens := range []int{5, 40} {
		n := (tokens + 15) / 16
		id := fmt.Sprintf("req-%d", i)
		pushOne(t, r, true, id, id, blocksFrom(1+8*i, n), blocksFrom(30+8*i, n), tokens)
	}
	var staged, direct uint64
	for _, p := range r.producers {
		staged += extra(t, p.Stats(), "staged_transfers")
		direct += extra(t, p.Stats(), "direct_transfers")
	}
	require.Zero(t, staged)
	require.Equal(t, uint64(4), direct, "2 requests x 2 prefill ranks")
	pre, dec := inUse(r)
	require.Zero(t, pre+dec, "slots back")
}
