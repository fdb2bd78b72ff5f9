package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/connector"
)

// skewedRank is a prefill rank whose DropHolds answers from a script: the
// holds it drops on each call.
type skewedRank struct {
	connector.Producer
	drops []int
	held  int
}

func (r *skewedRank) DropHolds(why string, unclaimedFor time.Duration) (int, int, error) {
	n := 0
	if len(r.drops) > 0 {
		n, r.drops = r.drops[0], r.drops[1:]
	}
	r.held -= n
	return n, r.held, nil
}

// A request's holds pass the unclaimed bound rank by rank (each rank times
// its own from its RequestFinished): the engine logs a request dropped
// once every rank dropped it, once.
func TestDropHoldsLogsRequestsEveryRankDropped(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r0 := &skewedRank{drops: []int{1, 0, 1, 0}, held: 3}
	r1 := &skewedRank{drops: []int{0, 1, 0, 1}, held: 3}
	s := &Server{log: zap.New(core), prods: []connector.Producer{r0, r1}}
	lines := func() []map[string]any {
		var out []map[string]any
		for _, e := range logs.FilterMessage("engine closing: dropped holds no decode engine asked about").All() {
			out = append(out, e.ContextMap())
		}
		return out
	}
	require.Equal(t, 3, s.dropHolds(time.Second, false))
	require.Empty(t, lines(), "rank 1 still holds the request")
	require.Equal(t, 2, s.dropHolds(time.Second, false))
	require.Len(t, lines(), 1)
	require.Equal(t, int64(1), lines()[0]["dropped"])
	require.Equal(t, int64(2), lines()[0]["still_held"])
	s.dropHolds(time.Second, false)
	s.dropHolds(time.Second, false)
	require.Len(t, lines(), 2, "the second request, once")
	require.Equal(t, int64(1), lines()[1]["dropped"])
	require.Equal(t, int64(1), lines()[1]["still_held"])
}
