package handshake

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/nixl"
)

// stageRank is TP rank tp of stage pp of a PP 2 engine of a 4-layer model:
// stage 0 holds layers 0-1, stage 1 layers 2-3.
func stageRank(t testing.TB, pp, tp, tpSize int) Rank {
	t.Helper()
	g := descriptors.Geometry{Layers: 4, KVHeads: 4, HeadDim: 8, DType: "bfloat16", BlockSize: 16, Blocks: 8, TPSize: tpSize, PPSize: 2}
	l, err := g.StageLayout(nixl.DRAM, pp, tp, nixl.Desc{Addr: 0x10000, Len: g.StageBytes(pp)})
	require.NoError(t, err)
	return Rank{TPRank: tp, PPRank: pp, Agent: "prefill-" + string(rune('0'+pp*tpSize+tp)), Metadata: []byte{1}, Layout: l}
}

func stagePayload(t testing.TB) Payload {
	return Payload{EngineID: "e", Compat: compat(ModePush), TPSize: 2, PPSize: 2, BlockSize: 16,
		Ranks: []Rank{stageRank(t, 0, 0, 2), stageRank(t, 0, 1, 2), stageRank(t, 1, 0, 2), stageRank(t, 1, 1, 2)}}
}

func TestPayloadValidateStages(t *testing.T) {
	good := stagePayload(t)
	require.NoError(t, good.Validate())
	for want, mutate := range map[string]func(p *Payload){
		"payload has 2 ranks, tp_size 2 x pp_size 2 is 4":                                    func(p *Payload) { p.Ranks = p.Ranks[:2] },
		"payload ranks[2].pp_rank is 0, want 1":                                              func(p *Payload) { p.Ranks[2].PPRank = 0 },
		"payload ranks[3].layout is stage 0 of 2, want 1 of 2":                               func(p *Payload) { p.Ranks[3].Layout.PPRank = 0 },
		"payload ranks[1].layout is stage 0 of 1, want 0 of 2":                               func(p *Payload) { p.Ranks[1].Layout.PPSize = 0 },
		"payload ranks[3].tp_rank is 0":                                                      func(p *Payload) { p.Ranks[3].TPRank = 0 },
		"payload tp_size 2 x pp_size 16385 is above the limit of 1024 ranks":                 func(p *Payload) { p.PPSize = descriptors.MaxPPSize + 1 },
		"payload ranks[3].layout holds layers [1, 3) of 4, stage 1's first rank [2, 4) of 4": func(p *Payload) { p.Ranks[3].Layout.FirstLayer = 1 },
		"payload stages: descriptors: stage 1: FirstLayer 1, want 2 (where stage 0 ends)": func(p *Payload) {
			p.Ranks[2].Layout.FirstLayer, p.Ranks[3].Layout.FirstLayer = 1, 1
		},
	} {
		p := stagePayload(t)
		mutate(&p)
		assert.EqualError(t, p.Validate(), want)
	}
}

func TestServeStages(t *testing.T) {
	e := Engine{EngineID: "prefill-e", Compat: compat(ModePush), TPSize: 2, PPSize: 2, BlockSize: 16}
	s := serve(t, e, ServerOptions{})
	good := stagePayload(t)
	wrong := good.Ranks[2]
	wrong.PPRank = 0
	assert.EqualError(t, s.SetRank(wrong), "rank 0 of stage 0: layout says stage 1 of 2, engine pp size is 2")
	for _, r := range good.Ranks {
		require.NoError(t, s.SetRank(r))
	}
	assert.EqualError(t, s.SetRank(good.Ranks[3]), "rank 3 is already set")
	c, err := NewClient("decode-e", compat(ModePush), time.Second, 0)
	require.NoError(t, err)
	defer c.Close()
	p, err := c.Get(context.Background(), "prefill-e", s.Addr().String())
	require.NoError(t, err)
	require.Len(t, p.Ranks, 4)
	for i, r := range p.Ranks {
		assert.Equal(t, good.Ranks[i].Agent, r.Agent)
		assert.Equal(t, i, r.Layout.WorldRank())
	}
	s.ClearRank(3)
	c.Forget("prefill-e", s.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, "prefill-e", s.Addr().String())
	assert.ErrorIs(t, err, context.DeadlineExceeded, "rank 3 withdrawn: the client retries until its deadline")
}

// FuzzStageReplyFrame is FuzzReplyFrame seeded with a pipeline-parallel
// payload: whatever decodes and validates has stages that cover the
// model once, every rank of a stage holding the stage's layers.
func FuzzStageReplyFrame(f *testing.F) {
	p := stagePayload(f)
	p.Hash = p.Compat.Hash()
	if b, err := sidechannel.Encode(Reply{Compat: p.Compat, Hash: p.Hash, Payload: &p, Now: 1}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Reply
		if err := sidechannel.Decode(body, &r); err != nil || r.Payload == nil {
			return
		}
		pl := r.Payload
		if pl.Validate() != nil {
			return
		}
		first := make([]*descriptors.Layout, pl.PPSize)
		for i := range pl.Ranks {
			l := &pl.Ranks[i].Layout
			if s := i / pl.TPSize; first[s] == nil {
				first[s] = l
			} else if l.FirstLayer != first[s].FirstLayer || l.NumLayers != first[s].NumLayers {
				t.Fatalf("rank %d of stage %d holds other layers than the stage's first rank", i, s)
			}
		}
		if pl.PPSize > 1 {
			if err := descriptors.CheckStages(first); err != nil {
				t.Fatalf("a validated payload's stages: %v", err)
			}
		}
	})
}
