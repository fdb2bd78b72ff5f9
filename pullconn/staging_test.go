package pullconn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stagingMem gives every rank of a cluster staging slots of its own; the
// buffers are freed after the cluster closed.
type stagingMem struct {
	t      *testing.T
	mode   connector.StagingMode
	slots  int
	bytes  uint64
	copier map[string]connector.Copier // by side, nil: host copy
	bufs   []*nixl.Buffer
}

func newStagingMem(t *testing.T, mode connector.StagingMode, slots int, bytes uint64) *stagingMem {
	m := &stagingMem{t: t, mode: mode, slots: slots, bytes: bytes, copier: map[string]connector.Copier{}}
	t.Cleanup(func() {
		for _, b := range m.bufs {
			_ = b.Free()
		}
	})
	return m
}

func (m *stagingMem) rank(side string, then func(*Config)) func(*Config) {
	return func(c *Config) {
		buf, err := nixl.AllocBuffer(int(m.bytes) * m.slots)
		require.NoError(m.t, err)
		m.bufs = append(m.bufs, buf)
		c.Staging = connector.Staging{Mode: m.mode, Mem: nixl.DRAM, Base: buf.Addr(), SlotBytes: m.bytes, Slots: m.slots,
			DescCost: 6 * time.Microsecond, CopyBandwidth: 1e9, Copier: m.copier[side]}
		if then != nil {
			then(c)
		}
	}
}

func stagedCluster(t *testing.T, o clusterOpts, m *stagingMem) *cluster {
	o.prefillCfg, o.decodeCfg = m.rank("prefill", o.prefillCfg), m.rank("decode", o.decodeCfg)
	return newCluster(t, o)
}

func slotsInUse(c *cluster) (pre, dec int) {
	pre = pullOf(c.t, c.pe).slots.inUse()
	for _, cn := range c.cons {
		if cn.rd.stage.pool != nil {
			dec += cn.rd.stage.pool.InUse()
		}
	}
	return pre, dec
}

func pick(rng *rand.Rand, layout string, n, start int) []int {
	switch layout {
	case "fragmented":
		return rng.Perm(testBlocks)[:n]
	case "partly":
		var out []int
		for _, s := range rng.Perm(testBlocks / 8) {
			for i := range 2 + rng.IntN(6) {
				if len(out) < n && i < 8 {
					out = append(out, s*8+i)
				}
			}
		}
		return out[:n]
	}
	return blocksFrom(start, n)
}

// TestStagedPullBytes: every geometry, fragmented, partly fragmented or
// contiguous, with staging on, off and chosen by the model: decode's
// blocks hold prefill's bytes; the counters say which path each READ
// took; every request ends and is freed once; no slot stays held.
func TestStagedPullBytes(t *testing.T) {
	geoms := []struct{ pre, dec side }{
		{side{1, 16}, side{1, 16}}, {side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}},
		{side{1, 16}, side{1, 32}}, {side{1, 32}, side{1, 16}}, {side{2, 32}, side{1, 16}},
	}
	for _, g := range geoms {
		for _, layout := range []string{"fragmented", "partly", "contiguous"} {
			for _, mode := range []connector.StagingMode{connector.StagingOn, connector.StagingOff, connector.StagingAuto} {
				name := fmt.Sprintf("tp%d-%d/bs%d-%d/%s/%s", g.pre.tp, g.dec.tp, g.pre.bs, g.dec.bs, layout, cmpOr(string(mode), "off"))
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(len(name)), 5))
					m := newStagingMem(t, mode, 2, 64<<10)
					// The cluster's finish calls every prefill rank
					// before it hands the Params on.
					c := stagedCluster(t, clusterOpts{prefill: g.pre, decode: g.dec,
						prefillCfg: func(rc *Config) { rc.ParamsAfterAllRanks = true }}, m)
					const tokens = 8 * 32
					pb := pick(rng, layout, tokens/g.pre.bs, 1)
					db := pick(rng, layout, tokens/g.dec.bs, 20)
					c.fill(3, pb, tokens)
					p := c.finish("r", pb)
					c.load("d", p, db)
					for i, r := range c.result("d") {
						require.NoError(t, r.Err, "decode rank %d", i)
					}
					c.verify(3, db, 0, tokens)
					freed := c.freed(1)
					for i := range c.prods {
						require.Equal(t, map[string]int{"r": 1}, freed[i])
					}
					if mode == connector.StagingOff {
						require.Nil(t, p.RemoteStagingSlot)
						_, ok := c.cons[0].Stats().Get("staged_transfers")
						require.False(t, ok, "no staging counters without staging")
						return
					}
					var staged, direct uint64
					for _, cn := range c.cons {
						staged += extraCount(t, cn.Stats(), "staged_transfers")
						direct += extraCount(t, cn.Stats(), "direct_transfers")
					}
					reads := uint64(len(c.cons) * len(c.prods))
					if g.pre.tp > g.dec.tp {
						reads = uint64(len(c.prods))
					} else if g.dec.tp > g.pre.tp {
						reads = uint64(len(c.cons))
					}
					require.Equal(t, reads, staged+direct, "every READ counted once")
					if mode == connector.StagingOn {
						require.NotNil(t, p.RemoteStagingSlot)
						require.Equal(t, reads, staged, "every READ staged")
					}
					if mode == connector.StagingAuto && layout == "fragmented" {
						require.NotNil(t, p.RemoteStagingSlot)
						require.Equal(t, reads, staged, "the model stages fragmented blocks")
					}
					if mode == connector.StagingAuto && layout == "contiguous" && g.pre == g.dec {
						require.Nil(t, p.RemoteStagingSlot, "prefill does not gather contiguous blocks")
						require.Equal(t, reads, direct)
					}
					pre, dec := slotsInUse(c)
					require.Zero(t, pre, "prefill slots released")
					require.Zero(t, dec, "decode slots released")
				})
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func extraCount(t *testing.T, s connector.Stats, name string) uint64 {
	t.Helper()
	v, ok := s.Get(name)
	require.True(t, ok, "counter %s", name)
	return v
}

// TestStagedPullSlotsBounded: with one slot per rank, a second request
// while the first is held finds none and is read directly, with the same
// bytes; the slot comes back with the first's hold.
func TestStagedPullSlotsBounded(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	c := stagedCluster(t, clusterOpts{}, m)
	rng := rand.New(rand.NewPCG(9, 9))
	perm := rng.Perm(testBlocks)
	a, b := perm[:6], []int{perm[10], perm[12], perm[14]}
	c.fill(1, a, 6*16)
	pa := c.finish("a", a)
	c.fill(2, b, 3*16)
	pb := c.finish("b", b)
	require.NotNil(t, pa.RemoteStagingSlot)
	require.Nil(t, pb.RemoteStagingSlot, "the only slot is a's until a is freed")
	require.Equal(t, uint64(1), extraCount(t, c.prods[0].Stats(), "staging_no_slot"))
	pre, _ := slotsInUse(c)
	require.Equal(t, 1, pre)
	// Overwrite a's blocks once its background gather is done: decode
	// must read the slot.
	eventually(t, func() bool { return extraCount(t, c.prods[0].Stats(), "staged_transfers") == 1 })
	c.fill(5, a, 6*16)
	c.load("da", pa, blocksFrom(10, 6))
	c.load("db", pb, blocksFrom(30, 3))
	res := c.results(2)
	for _, id := range []string{"da", "db"} {
		require.NoError(t, res[0][id].Err)
	}
	c.verify(1, blocksFrom(10, 6), 0, 6*16)
	c.verify(2, blocksFrom(30, 3), 0, 3*16)
	c.freed(2)
	pre, dec := slotsInUse(c)
	require.Zero(t, pre)
	require.Zero(t, dec)
	c.fill(4, b, 3*16)
	pc := c.finish("c", b)
	require.NotNil(t, pc.RemoteStagingSlot, "the slot is free again")
}

// TestStagedPullFailures: a failed background gather fails the load with
// ErrStaging (prefill answers its readiness query so), never done; a
// failed staged READ or scatter fails the load; decode's slot comes back,
// prefill's with the hold, and the next request goes through.
func TestStagedPullFailures(t *testing.T) {
	for _, step := range []string{"gather", "transfer", "scatter"} {
		t.Run(step, func(t *testing.T) {
			// Two slots: after a failed READ prefill keeps x's blocks and
			// slot until its lease, as it must (decode may still read).
			m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
			if step == "gather" {
				m.copier["prefill"] = &stagingtest.Copier{FailAt: 1}
			}
			if step == "scatter" {
				m.copier["decode"] = &stagingtest.Copier{FailAt: 1}
			}
			c := stagedCluster(t, clusterOpts{}, m)
			if step == "transfer" {
				_, err := c.fab.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "decode-0", Count: 1})
				require.NoError(t, err)
			}
			blocks := []int{9, 2, 40}
			c.fill(1, blocks, 48)
			p := c.finish("x", blocks)
			require.NotNil(t, p.RemoteStagingSlot)
			require.True(t, p.RemoteStagingAwait)
			c.load("dx", p, []int{1, 3, 5})
			r := c.result("dx")[0]
			switch step {
			case "gather":
				require.ErrorIs(t, r.Err, connector.ErrStaging)
				require.ErrorContains(t, r.Err, `request "dx": prefill rank 0's gather into its staging slot failed`)
				require.Equal(t, 1, c.prods[0].Held(), "the blocks stay held until the hold ends")
				require.Equal(t, uint64(1), extraCount(t, c.cons[0].Stats(), "staging_failures"))
			case "scatter":
				require.ErrorIs(t, r.Err, connector.ErrStaging)
			default:
				require.ErrorIs(t, r.Err, ErrTransfer)
			}
			pre, dec := slotsInUse(c)
			require.Zero(t, dec, "decode slot released")
			require.Equal(t, 1, pre, "prefill keeps x's slot with its hold")
			c.fill(2, []int{20, 22}, 32)
			p = c.finish("y", []int{20, 22})
			require.NotNil(t, p.RemoteStagingSlot, "a slot is free for the next request")
			c.load("dy", p, []int{30, 33})
			require.NoError(t, c.result("dy")[0].Err)
			c.verify(2, []int{30, 33}, 0, 32)
		})
	}
}

// TestStagedPullClose: closing decode while a staged READ is in flight
// ends the load once with connector.ErrClosed and frees its slot; closing prefill
// frees every hold and slot.
func TestStagedPullClose(t *testing.T) {
	fc := connector.NewManualClock(time.Unix(1_800_000_000, 0))
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	c := stagedCluster(t, clusterOpts{fabric: []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(1, 0))}}, m)
	blocks := []int{7, 3}
	c.fill(1, blocks, 32)
	p := c.finish("z", blocks)
	require.NotNil(t, p.RemoteStagingSlot)
	c.load("dz", p, []int{4, 8})
	eventually(t, func() bool { return c.fab.Counters().Posted == uint64(staging.ChunkCount(2*testLayers, 0)) })
	_, dec := slotsInUse(c)
	require.Equal(t, 1, dec, "decode slot held while the READ is in flight")
	require.NoError(t, c.cons[0].Close())
	r := c.result("dz")
	require.ErrorIs(t, r[0].Err, connector.ErrClosed)
	_, dec = slotsInUse(c)
	require.Zero(t, dec)
	require.NoError(t, c.prods[0].Close())
	require.Equal(t, map[string]int{"z": 1}, c.freed(1)[0])
	pre, _ := slotsInUse(c)
	require.Zero(t, pre)
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStagedReadChunked: with TransferChunk the staged READ is several
// descriptors, and the bytes are the same.
func TestStagedReadChunked(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	c := stagedCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.Staging.TransferChunk = 1024 }}, m)
	blocks := []int{9, 3, 30, 12}
	c.fill(4, blocks, 64)
	p := c.finish("r", blocks)
	c.load("d", p, []int{5, 40, 7, 22})
	require.NoError(t, c.result("d")[0].Err)
	c.verify(4, []int{5, 40, 7, 22}, 0, 64)
	s := c.cons[0].Stats()
	require.Equal(t, uint64(1), extraCount(t, s, "staged_transfers"))
	require.Equal(t, uint64(8), s.Descriptors, "8 KiB image in 1 KiB descriptors")
}

// TestParamsStagingSlotChecked: a slot outside any staging memory is
// refused by Validate, naming the field.
func TestParamsStagingSlotChecked(t *testing.T) {
	p := Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteEngineID: "e", RemoteRequestID: "r", RemoteHost: "h", RemotePort: 1, TPSize: 1}}
	for _, bad := range []int{-1, staging.MaxSlots} {
		p.RemoteStagingSlot = &bad
		err := p.Validate()
		require.ErrorIs(t, err, connector.ErrInvalid)
		require.ErrorContains(t, err, "RemoteStagingSlot")
	}
	ok := 3
	p.RemoteStagingSlot = &ok
	require.NoError(t, p.Validate())
}

// TestStagingMeasureCopy: with MeasureCopy the rank measures its copy
// bandwidth at start and the model uses it; requests still move right.
func TestStagingMeasureCopy(t *testing.T) {
	m := newStagingMem(t, connector.StagingAuto, 2, 64<<10)
	measure := func(rc *Config) { rc.Staging.MeasureCopy = true }
	c := stagedCluster(t, clusterOpts{prefillCfg: measure, decodeCfg: measure}, m)
	require.Greater(t, c.prods[0].model.CopyBandwidth, 0.0)
	require.NotEqual(t, 1e9, c.prods[0].model.CopyBandwidth, "measured, not the configured 1e9")
	blocks := []int{9, 3, 30, 12}
	c.fill(4, blocks, 64)
	p := c.finish("r", blocks)
	c.load("d", p, []int{5, 40, 7, 22})
	require.NoError(t, c.result("d")[0].Err)
	c.verify(4, []int{5, 40, 7, 22}, 0, 64)
}
