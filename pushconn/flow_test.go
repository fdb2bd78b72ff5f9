package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// pushOne runs one request through the rig: decode registers dst blocks,
// prefill fills and finishes src blocks, in the order given; it checks
// decode's result and bytes and prefill's release, and returns decode's
// result.
func pushOne(t *testing.T, r *rig, registerFirst bool, decID, preID string, src, dst []int, tokens int, opts ...requestOption) connector.Result {
	t.Helper()
	for i, l := range r.preLayout {
		_ = i
		fillStage(t, l, src, 7, tokens) // fill, at the model regions of a pipeline stage
	}
	for _, l := range r.decLayout {
		zero(t, l, dst)
	}
	register := func() {
		for _, c := range r.consumers {
			require.NoError(t, c.Register(decID, Coordinates(r.pre), dst, opts...))
		}
	}
	finish := func() {
		for _, p := range r.producers {
			params, err := p.RequestFinished(preID, src, opts...)
			require.NoError(t, err)
			require.Equal(t, modePush, params.TransferMode)
			require.Equal(t, preID, params.RemoteRequestID)
			require.Equal(t, Coordinates(r.pre), params.prefill())
		}
	}
	if registerFirst {
		register()
		// Every prefill rank has its registrations (one per decode rank
		// it writes into) before the finish.
		for _, p := range r.producers {
			admitted(t, p, uint64(max(len(r.consumers)/len(r.producers), 1)))
		}
		finish()
	} else {
		finish()
		register()
	}
	var res connector.Result
	for i, c := range r.consumers {
		got := await(t, c, 1)
		require.Len(t, got, 1)
		require.NoError(t, got[0].Err)
		require.Equal(t, decID, got[0].RequestID)
		res = got[0]
		n := check(t, r.decLayout[i], dst, 0, 7, tokens)
		require.Positive(t, n)
	}
	for _, p := range r.producers {
		freedOnce(t, p, preID)
	}
	return res
}

func TestRegistrationBeforeFinish(t *testing.T) {
	r := newRig(t, rigConfig{})
	pushOne(t, r, true, "req-1", "req-1", blocksFrom(3, 4), blocksFrom(10, 4), 4*16)
	ps := r.producers[0].Stats()
	require.Equal(t, uint64(1), ps.Transfers)
	require.Equal(t, uint64(1), extra(t, ps, "matched_exact"))
	require.Equal(t, uint64(4*4*16*modelHeads*headBytes), ps.Bytes, "4 regions x 4 blocks x 1 KiB")
	require.Equal(t, uint64(4), ps.Descriptors, "one coalesced descriptor per region")
	require.Equal(t, uint64(1), extra(t, r.consumers[0].Stats(), "registrations_sent"))
	require.Equal(t, uint64(1), r.fabric.Counters().Posted)
}

func TestRegistrationAfterFinish(t *testing.T) {
	r := newRig(t, rigConfig{})
	pushOne(t, r, false, "req-2", "req-2", blocksFrom(0, 3), blocksFrom(20, 3), 40)
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "matched_exact"))
}

func TestSuffixStrippedMatch(t *testing.T) {
	r := newRig(t, rigConfig{})
	pushOne(t, r, true, "cmpl-42-0-DEADBEEF", "cmpl-42-0-0badf00d", blocksFrom(0, 2), blocksFrom(5, 2), 32)
	ps := r.producers[0].Stats()
	require.Equal(t, uint64(1), extra(t, ps, "matched_stripped"))
	require.Zero(t, extra(t, ps, "matched_exact"))
}

func TestTransferIDMatch(t *testing.T) {
	r := newRig(t, rigConfig{})
	pushOne(t, r, false, "decode-side-id", "prefill-side-id", blocksFrom(0, 2), blocksFrom(5, 2), 20, withTransferID("xfer-0001"))
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "matched_transfer_id"))
}

func TestPrefillTP2DecodeTP1(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 2, decTP: 1})
	pushOne(t, r, true, "tp21", "tp21", blocksFrom(1, 3), blocksFrom(30, 3), 48)
	cs := r.consumers[0].Stats()
	require.Equal(t, uint64(2), extra(t, cs, "registrations_sent"), "one per prefill rank")
	for _, p := range r.producers {
		require.Equal(t, uint64(1), p.Stats().Transfers)
	}
}

func TestPrefillTP1DecodeTP2(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 1, decTP: 2})
	pushOne(t, r, true, "tp12", "tp12", blocksFrom(1, 3), blocksFrom(30, 3), 48)
	ps := r.producers[0].Stats()
	require.Equal(t, uint64(2), ps.Transfers, "one WRITE into each decode rank")
	require.Equal(t, uint64(2), extra(t, ps, "registrations_received"))
	for _, c := range r.consumers {
		require.Equal(t, uint64(1), extra(t, c.Stats(), "registrations_sent"))
	}
}

func TestBlockSize16To32(t *testing.T) {
	r := newRig(t, rigConfig{preBlock: 16, decBlock: 32})
	// 70 tokens: 5 prefill blocks of 16, 3 decode blocks of 32.
	pushOne(t, r, true, "bs", "bs", blocksFrom(0, 5), blocksFrom(7, 3), 70)
}

func TestBlockSize32To16(t *testing.T) {
	r := newRig(t, rigConfig{preBlock: 32, decBlock: 16})
	pushOne(t, r, false, "bs", "bs", blocksFrom(2, 3), blocksFrom(40, 5), 70)
}

func TestBlockSizesAndTPDiffer(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 2, decTP: 1, preBlock: 16, decBlock: 32})
	pushOne(t, r, true, "mix", "mix", blocksFrom(0, 4), blocksFrom(9, 2), 64)
}

func TestDecodeWaitsForEveryWriterRank(t *testing.T) {
	// Prefill TP 2 -> decode TP 1: decode needs both ranks' completions.
	r := newRig(t, rigConfig{preTP: 2, decTP: 1})
	c := r.consumers[0]
	require.NoError(t, c.Register("both", Coordinates(r.pre), blocksFrom(0, 2)))
	for _, p := range r.producers {
		admitted(t, p, 1)
	}
	_, err := r.producers[0].RequestFinished("both", blocksFrom(0, 2))
	require.NoError(t, err)
	freedOnce(t, r.producers[0], "both") // rank 0's WRITE is done
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, c.Drain(), "one of two writer ranks reported")
	require.Equal(t, 1, c.Pending())
	_, err = r.producers[1].RequestFinished("both", blocksFrom(0, 2))
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
	require.Zero(t, c.Stats().UnknownNotifications)
}
