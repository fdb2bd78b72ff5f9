package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestNotNegativeNamesTheFirstNegativeField(t *testing.T) {
	assert.NoError(t, NotNegative(Duration{"RankConfig.Lease", 0}, Duration{"RankConfig.PollInterval", time.Millisecond}))
	assert.EqualError(t, NotNegative(
		Duration{"RankConfig.Lease", time.Second},
		Duration{"RankConfig.PollInterval", -time.Millisecond},
		Duration{"RankConfig.IdleInterval", -time.Second},
	), "RankConfig.PollInterval is -1ms, want > 0")
}

func TestCheckRankComparesTheLayoutWithTheEngine(t *testing.T) {
	e, err := Start(Config{EngineID: "e", Model: "m", DType: "d", TPSize: 2, BlockSize: 16}, testConn)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	a, err := fab.NewAgent("a")
	require.NoError(t, err)

	assert.EqualError(t, e.CheckRank(nil, descriptors.Layout{TPSize: 2, BlockTokens: 16}), "RankConfig.Agent is nil")
	assert.EqualError(t, e.CheckRank(a, descriptors.Layout{TPSize: 1, BlockTokens: 16}), `RankConfig.Layout.TPSize is 1, engine "e" has TP size 2`)
	assert.EqualError(t, e.CheckRank(a, descriptors.Layout{TPSize: 2, BlockTokens: 32}), `RankConfig.Layout.BlockTokens is 32, engine "e" has block size 16`)
	err = e.CheckRank(a, descriptors.Layout{TPSize: 2, BlockTokens: 16})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RankConfig.Layout: descriptors: ")
}
