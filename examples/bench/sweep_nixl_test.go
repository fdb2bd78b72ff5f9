//go:build nixl

package main

import (
	"context"
	"testing"

	"github.com/gonixl/gonixl/examples/stack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sweep on NIXL agents (UCX over lo): every request ends, decode
// verified the KV bytes the real transfers moved (the split modes: the
// collocated one moves no KV).
func TestSweepOnNIXLAgents(t *testing.T) {
	p := small
	p.Modes = []string{"pull", "pull-inline", "push"}
	p.Rates = []float64{20}
	p.InputLens = []int{48}
	p.Prompts = func(float64) int { return 10 }
	res, err := sweep(context.Background(), sweepConfig{Preset: p, Percentile: []float64{99}, ResultDir: t.TempDir(), Native: true})
	require.NoError(t, err)
	require.Len(t, res.Points, 3)
	assert.Contains(t, res.Agents, "NIXL (UCX)")
	for _, pt := range res.Points {
		assert.Equal(t, 10, pt.Completed, pt.Mode)
		assert.Zero(t, pt.KVVerifyFailures, pt.Mode)
		assert.NotZero(t, pt.KVBytesVerified, pt.Mode)
		assert.NotZero(t, pt.Transfers, pt.Mode)
	}
}

// The sweep of separate processes: the engines (NIXL agents over UCX on
// lo) and the proxy as programs, started and stopped for every point; the
// preset's collocated mode is left out (split stacks only).
func TestSweepOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bins, err := stack.BuildPrograms(context.Background(), t.TempDir())
	require.NoError(t, err)
	p := small
	p.Rates = []float64{10}
	p.InputLens = []int{64}
	p.Prompts = func(float64) int { return 6 }
	dir := t.TempDir()
	res, err := sweep(context.Background(), sweepConfig{Preset: p, Percentile: []float64{99}, ResultDir: dir, Processes: &bins})
	require.NoError(t, err)
	require.Len(t, res.Points, 3)
	assert.Contains(t, res.Agents, "separate engine and proxy processes")
	for _, pt := range res.Points {
		assert.Equal(t, 6, pt.Completed, pt.Mode)
		assert.Zero(t, pt.KVVerifyFailures, pt.Mode)
		assert.NotZero(t, pt.KVBytesVerified, "%s: decode verified no KV", pt.Mode)
		assert.NotZero(t, pt.Transfers, pt.Mode)
	}
}
