package handshake

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/sidechannel"
)

// TestReadyQuery: a readiness query reaches the engine checked, with the
// asking engine and agent, and its states come back in the ranks' order;
// malformed queries are refused naming what was wrong before the engine
// sees them; states outside the protocol's range in a reply are refused by
// the client; an engine that gathers nothing says so.
func TestReadyQuery(t *testing.T) {
	var got []ReadyQuery
	var reader, agent string
	answer := []int64{3, ReadyFailed}
	s := serve(t, engine(2), ServerOptions{OnReady: func(r, a string, q ReadyQuery) []int64 {
		got, reader, agent = append(got, q), r, a
		return answer
	}})
	c := client(t, ModePull, time.Second)
	q := ReadyQuery{ID: "x", Key: 9, Ranks: RankNumbers{1, 0}, Known: ReadyStates{1, 0}, WaitMicros: 5000}
	states, err := c.Ready(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", q)
	require.NoError(t, err)
	assert.Equal(t, []int{3, ReadyFailed}, states)
	assert.Equal(t, []ReadyQuery{q}, got)
	assert.Equal(t, "decode-e", reader)
	assert.Equal(t, "decode-e-0", agent)

	got = nil
	for _, tc := range []struct {
		q    ReadyQuery
		want string
	}{
		{ReadyQuery{Ranks: RankNumbers{0}, Known: ReadyStates{0}}, "readiness query: id is 0 bytes, want 1..1024"},
		{ReadyQuery{ID: "x", Known: ReadyStates{}}, "readiness query: names 0 prefill ranks, engine has 2"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{0, 1}, Known: ReadyStates{0}}, "readiness query: has 1 known states for 2 ranks"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{0}, Known: ReadyStates{0}, WaitMicros: -1}, "readiness query: wait of -1 us, want 0..1000000"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{0}, Known: ReadyStates{0}, WaitMicros: 1_000_001}, "readiness query: wait of 1000001 us, want 0..1000000"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{1, 1}, Known: ReadyStates{0, 0}}, "readiness query: prefill rank 1 is out of range 0..1 or named twice"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{2}, Known: ReadyStates{0}}, "readiness query: prefill rank 2 is out of range 0..1 or named twice"},
		{ReadyQuery{ID: "x", Ranks: RankNumbers{0}, Known: ReadyStates{-3}}, "readiness query: known state -3 of rank 0 outside [-2, 1048576]"},
	} {
		_, err := c.Ready(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", tc.q)
		require.ErrorIs(t, err, ErrFailed)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = c.Ready(context.Background(), "prefill-e", s.Addr().String(), "", q)
	require.ErrorContains(t, err, "readiness query names an agent of 0 bytes, want 1..1024")
	assert.Nil(t, got, "nothing malformed reached the engine")

	for _, bad := range [][]int64{{3}, {3, -3}, {3, maxRegionsState + 1}} {
		answer = bad
		_, err = c.Ready(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", q)
		require.ErrorIs(t, err, ErrFailed, "%v", bad)
	}
	answer = []int64{3}
	_, err = c.Ready(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", q)
	require.ErrorContains(t, err, "readiness query to engine \"prefill-e\" at "+s.Addr().String()+": 1 answers for 2 ranks")

	h := Hello{EngineID: "d", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), Agent: "a", Extend: []string{"x"}, Ready: &q}
	assert.Equal(t, "a hello is a readiness query or a hold query or a confirmation, not two", s.answer(h).Error)

	plain := serve(t, engine(1), ServerOptions{})
	_, err = c.Ready(context.Background(), "prefill-e", plain.Addr().String(), "decode-e-0", ReadyQuery{ID: "x", Ranks: RankNumbers{0}, Known: ReadyStates{0}})
	require.ErrorContains(t, err, `engine "prefill-e" gathers no requests for peers (not a pull prefill engine with staging)`)
}

// TestReadyStatesBounded: a readiness query claiming more states than
// MaxConfirmRanks is refused as it is decoded, naming the count.
func TestReadyStatesBounded(t *testing.T) {
	many := make(ReadyStates, MaxConfirmRanks+1)
	body, err := sidechannel.Encode(Hello{EngineID: "d", Ready: &ReadyQuery{ID: "x", Known: many}})
	require.NoError(t, err)
	var h Hello
	err = sidechannel.Decode(body, &h)
	require.ErrorIs(t, err, sidechannel.ErrMalformed)
	require.ErrorContains(t, err, fmt.Sprintf("readiness query has %d states, limit %d", MaxConfirmRanks+1, MaxConfirmRanks))
	body, err = sidechannel.Encode(Hello{EngineID: "d", Ready: &ReadyQuery{ID: "x", Known: ReadyStates{3, -1}}})
	require.NoError(t, err)
	require.NoError(t, sidechannel.Decode(body, &h))
	assert.Equal(t, ReadyStates{3, -1}, h.Ready.Known)
}
