package pushconn

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Every stage's ranks write their own layers into decode's matching
// regions; each decode rank is done after one completion per writing rank
// of every stage, with every byte of every layer in place.
func TestStagesPush(t *testing.T) {
	for _, c := range []struct {
		name             string
		pp, preTP, decTP int
		stageFirst       int // the stage that finishes first
		decBlock         int // decode's block size (0: 16, prefill's)
	}{
		{"PP 2 x TP 2 -> TP 2", 2, 2, 2, 0, 0},
		{"PP 2 x TP 1 -> TP 2", 2, 1, 2, 1, 0},
		{"PP 2 x TP 2 -> TP 1", 2, 2, 1, 1, 0},
		{"PP 3 x TP 1 -> TP 1", 3, 1, 1, 2, 0},
		{"PP 2 x TP 2 -> TP 1, decode blocks of 32 tokens", 2, 2, 1, 0, 32},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newStageRig(t, stageRigConfig{pp: c.pp, preTP: c.preTP, decTP: c.decTP, decBlock: c.decBlock})
			const tokens = 3*16 + 5
			src, dst := []int{9, 3, 40, 7}, []int{1, 22, 5, 60}
			if c.decBlock == 32 {
				dst = []int{17, 2}
			}
			for _, l := range r.preLayout {
				fillStage(t, l, src, 11, tokens)
			}
			coords := Coordinates(r.pre)
			require.Equal(t, c.pp, coords.PPSize)
			for _, cons := range r.consumers {
				require.NoError(t, cons.Register("chat-1", coords, dst))
			}
			// One stage finishes before the others (a pipeline's stages
			// end at different times); each writes when its own ends.
			order := []int{}
			for w, l := range r.preLayout {
				if l.PPRank == c.stageFirst {
					order = append([]int{w}, order...)
				} else {
					order = append(order, w)
				}
			}
			for _, w := range order {
				params, err := r.producers[w].RequestFinished("chat-1", src, withTokens(tokens))
				require.NoError(t, err)
				require.Equal(t, c.pp, params.PPSize)
			}
			var writes uint64
			for d, cons := range r.consumers {
				got := await(t, cons, 1)
				require.NoError(t, got[0].Err)
				n := check(t, r.decLayout[d], dst, 0, 11, tokens)
				require.Equal(t, 2*stageLayers*tokens*r.decLayout[d].KVHeads*headBytes, n, "every layer's bytes checked")
				require.Equal(t, uint64(r.writers(d)), extra(t, cons.Stats(), "registrations_sent"), "one registration per writing rank of every stage")
				require.Equal(t, c.pp*max(1, c.preTP/c.decTP), r.writers(d), "vLLM's pp_size * max(1, P_tp/D_tp)")
				writes += uint64(r.writers(d))
			}
			var transfers uint64
			for _, p := range r.producers {
				require.Equal(t, c.preTP, p.world, "the completion names the TP size, as vLLM's world size (its TP group's)")
				freedOnce(t, p, "chat-1")
				transfers += p.Stats().Transfers
			}
			require.Equal(t, writes, transfers)
			require.Equal(t, writes, r.fabric.Counters().Posted)
		})
	}
}

// A stage rank that cannot post its WRITE fails the decode rank it feeds
// (PUSH_FAIL naming its world rank); the decode rank it does not feed is
// done; no result comes out before every rank of every stage that got the
// registration has written or failed.
func TestStageFailing(t *testing.T) {
	r := newStageRig(t, stageRigConfig{pp: 2, preTP: 2, decTP: 2})
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailPost, From: "prefill-3"}) // stage 1, TP rank 1
	require.NoError(t, err)
	src, dst := blocksFrom(0, 2), blocksFrom(30, 2)
	for _, l := range r.preLayout {
		fillStage(t, l, src, 5, 32)
	}
	for _, c := range r.consumers {
		require.NoError(t, c.Register("pf", Coordinates(r.pre), dst))
	}
	for _, p := range r.producers {
		admitted(t, p, 1)
	}
	for _, p := range r.producers {
		_, err := p.RequestFinished("pf", src)
		require.NoError(t, err)
	}
	ok := await(t, r.consumers[0], 1)
	require.NoError(t, ok[0].Err, "decode rank 0 is fed by prefill ranks 0 and 2 only")
	check(t, r.decLayout[0], dst, 0, 5, 32)
	bad := await(t, r.consumers[1], 1)
	require.True(t, isPushFail(bad[0].Err, "post"), "got %v", bad[0].Err)
	var pe *PushError
	require.True(t, errors.As(bad[0].Err, &pe))
	assert.Equal(t, 3, pe.Rank, "PUSH_FAIL names the world rank: pp rank 1 x TP 2 + TP rank 1")
	for _, p := range r.producers {
		freedOnce(t, p, "pf")
	}
	require.Equal(t, uint64(1), r.producers[3].Stats().FailedTransfers)
	require.Zero(t, r.consumers[1].Pending())
}

// Decode aborts after one stage wrote and while the other still may: the
// result waits for the other stage's answer, and that stage never writes
// into the released blocks.
func TestStageCancelWhileOneStageWrote(t *testing.T) {
	r := newStageRig(t, stageRigConfig{pp: 2, preTP: 1, decTP: 1})
	c := r.consumers[0]
	src, dst := blocksFrom(0, 2), blocksFrom(8, 2)
	for _, l := range r.preLayout {
		fillStage(t, l, src, 9, 32)
	}
	require.NoError(t, c.Register("ab", Coordinates(r.pre), dst))
	admitted(t, r.producers[0], 1)
	admitted(t, r.producers[1], 1)
	_, err := r.producers[1].RequestFinished("ab", src) // stage 1 writes layer 2
	require.NoError(t, err)
	freedOnce(t, r.producers[1], "ab")
	require.Equal(t, uint64(1), r.fabric.Counters().Posted)
	require.Empty(t, c.Drain(), "1 of 2 completions: not done")

	require.NoError(t, c.Abort("ab"))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_sent"), "only stage 0 had not answered")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_ack_received"))
	zero(t, r.decLayout[0], dst) // the engine reuses the blocks
	_, err = r.producers[0].RequestFinished("ab", src)
	require.NoError(t, err)
	freedOnce(t, r.producers[0], "ab") // at once: its registration was cancelled
	require.Equal(t, uint64(1), r.fabric.Counters().Posted, "stage 0 wrote into released blocks")
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "cancelled_registrations"))
}

// Decode aborts while one stage's WRITE is in flight: the result comes out
// only once that WRITE has ended (its completion, or its cancel's ack).
func TestStageAbortWaitsForWriteInFlight(t *testing.T) {
	r := newStageRig(t, stageRigConfig{pp: 2, preTP: 1, decTP: 1, agent: map[string][]loopback.AgentOption{
		"prefill-0": {loopback.AgentModel(loopback.FixedLatency(300 * time.Millisecond))},
	}})
	c := r.consumers[0]
	src, dst := blocksFrom(0, 1), blocksFrom(3, 1)
	require.NoError(t, c.Register("slow", Coordinates(r.pre), dst))
	admitted(t, r.producers[0], 1)
	admitted(t, r.producers[1], 1)
	_, err := r.producers[0].RequestFinished("slow", src)
	require.NoError(t, err)
	eventually(t, "stage 0's WRITE posted", func() bool { return r.fabric.Counters().Posted == 1 })
	require.NoError(t, c.Abort("slow"))
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, c.Drain(), "a result while stage 0's WRITE may still land")
	require.Equal(t, 1, c.Pending())
	_, err = r.producers[1].RequestFinished("slow", src)
	require.NoError(t, err)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), r.fabric.Counters().Completed, "stage 0's WRITE ended before the result")
	freedOnce(t, r.producers[0], "slow")
	freedOnce(t, r.producers[1], "slow")
	require.Equal(t, uint64(1), r.fabric.Counters().Posted, "stage 1 never wrote")
}

// What a pipeline stage cannot be or do is refused with the field named.
func TestStageRefusals(t *testing.T) {
	r := newStageRig(t, stageRigConfig{pp: 2, preTP: 1, decTP: 1})
	f := r.fabric
	a, err := f.NewAgent("extra")
	require.NoError(t, err)
	defer a.Close()

	// A decode rank of a pipeline stage.
	pg := stageGeometry(1, 2)
	dec, err := NewEngine(connector.EngineConfig{EngineID: "pp-decode", Model: "m", Geometry: pg})
	require.NoError(t, err)
	defer dec.Close()
	buf, err := nixl.AllocBuffer(int(pg.StageBytes(0)))
	require.NoError(t, err)
	defer buf.Free()
	l, err := pg.StageLayout(nixl.DRAM, 0, 0, buf.RegDesc().Desc)
	require.NoError(t, err)
	_, err = NewConsumer(dec, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "RankConfig.Layout.PPSize is 2: a decode rank (Consumer) holds every layer; pipeline-parallel decode is not supported")

	// A stage's layout on an engine without pipeline parallelism.
	_, err = NewProducer(r.dec, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, `RankConfig.Layout.PPSize is 2, engine "decode" has PP size 1`)

	// Staging a stage's transfers.
	_, err = NewProducer(dec, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Staging: connector.Staging{Mode: connector.StagingAuto}}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "staging a pipeline stage's transfers is not supported")

	// A registration naming another PP size than the prefill's handshake.
	wrong := Coordinates(r.pre)
	wrong.PPSize = 1
	require.NoError(t, r.consumers[0].Register("w", wrong, []int{0}))
	res := await(t, r.consumers[0], 1)
	require.ErrorIs(t, res[0].Err, connector.ErrInvalid)
	assert.EqualError(t, res[0].Err, `pushconn: invalid argument: request "w": Prefill.PPSize is 1, prefill engine "prefill" has PP size 2 (its handshake)`)
	wrong.PPSize = 0
	err = r.consumers[0].Register("w0", wrong, []int{0})
	assert.EqualError(t, err, "pushconn: invalid argument: Prefill.PPSize is 0, want >= 1")

	// vLLM's protocol with pipeline stages.
	vg := pg
	vg.KVPacked = true
	_, err = NewEngine(connector.EngineConfig{EngineID: "v", Model: "m", Geometry: vg, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM, ListenAddr: "127.0.0.1:0"})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "EngineConfig.Geometry.PPSize is 2: pipeline-parallel ranks in vLLM's protocol are not supported")
}

// In vLLM's protocol a decode fetches stage 0's ranks only: a request
// naming a prefill of PP 2 fails, naming both sizes, and nothing is sent.
func TestStageRefusedInVLLMProtocol(t *testing.T) {
	r := newRig(t, rigConfig{vllm: true})
	pf := Coordinates(r.pre)
	pf.PPSize = 2
	require.NoError(t, r.consumers[0].Register("v-1", pf, []int{0}))
	res := await(t, r.consumers[0], 1)
	require.ErrorIs(t, res[0].Err, connector.ErrInvalid)
	assert.EqualError(t, res[0].Err, `pushconn: invalid argument: request "v-1": Prefill.PPSize is 2, prefill engine "prefill" has PP size 1 (its handshake)`)
	require.Zero(t, extra(t, r.consumers[0].Stats(), "registrations_sent"))
}
