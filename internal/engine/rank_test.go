package engine

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
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
	a := &memAgent{name: "a"}

	assert.EqualError(t, e.CheckRank(nil, descriptors.Layout{TPSize: 2, BlockSize: 16}), "RankConfig.Agent is nil")
	assert.EqualError(t, e.CheckRank(a, descriptors.Layout{TPSize: 1, BlockSize: 16}), `RankConfig.Layout.TPSize is 1, engine "e" has TP size 2`)
	assert.EqualError(t, e.CheckRank(a, descriptors.Layout{TPSize: 2, BlockSize: 32}), `RankConfig.Layout.BlockSize is 32, engine "e" has block size 16`)
	err = e.CheckRank(a, descriptors.Layout{TPSize: 2, BlockSize: 16})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RankConfig.Layout: descriptors: ")
}

func TestPublishGivesEachStartOfARankANewIncarnation(t *testing.T) {
	e, err := Start(Config{EngineID: "e", Model: "m", DType: "d", TPSize: 1, BlockSize: 16}, testConn)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	a := &memAgent{name: "a"}
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: 2, BlockSize: 16, KVHeads: 1, HeadBytes: 16, DType: "d", TPSize: 1}
	buf, err := nixl.AllocBuffer(int(l.BlockLen()) * 2 * 2)
	require.NoError(t, err)
	defer buf.Free()
	for i := range 2 {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	first, err := e.Publish(a, l)
	require.NoError(t, err)
	require.NotZero(t, first)
	pl, err := e.Client().Get(context.Background(), "e", net.JoinHostPort(e.Host(), strconv.Itoa(e.Port())), 1)
	require.NoError(t, err)
	assert.Equal(t, first, pl.Ranks[0].Incarnation, "the payload carries the incarnation Publish returned")

	// The rank restarts: withdrawn, its memory deregistered, published again.
	_, err = e.Publish(a, l)
	require.ErrorIs(t, err, errTestInvalid, "a second rank 0 while the first is published")
	assert.Contains(t, err.Error(), `engine "e" already has a rank 0: close it first`)
	e.Withdraw(0)
	require.NoError(t, a.DeregisterMem(l.RegList(), nil))
	second, err := e.Publish(a, l)
	require.NoError(t, err)
	assert.NotZero(t, second)
	assert.NotEqual(t, first, second)
	e.Client().Forget("e", net.JoinHostPort(e.Host(), strconv.Itoa(e.Port())))
	pl, err = e.Client().Get(context.Background(), "e", net.JoinHostPort(e.Host(), strconv.Itoa(e.Port())), 1)
	require.NoError(t, err)
	assert.Equal(t, second, pl.Ranks[0].Incarnation)
}

func TestNewIncarnationIsNonZeroAndVaries(t *testing.T) {
	seen := map[uint64]bool{}
	for range 1000 {
		v := NewIncarnation()
		require.NotZero(t, v)
		seen[v] = true
	}
	assert.Len(t, seen, 1000)
}

// memAgent is the part of an agent Publish uses: memory registration and
// metadata. internal/ imports no agent implementation, tests included.
type memAgent struct {
	nixl.Agent
	name       string
	registered int
}

func (a *memAgent) Name() string { return a.name }

func (a *memAgent) RegisterMem(nixl.RegList, *nixl.Options) error {
	a.registered++
	return nil
}

func (a *memAgent) DeregisterMem(nixl.RegList, *nixl.Options) error {
	a.registered--
	return nil
}

func (a *memAgent) LocalMD() ([]byte, error) { return []byte("md-" + a.name), nil }
