package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The per-layer preset keeps qwen3-32b-h200's modeled costs and bytes
// with 16 layers in the engines' geometry: a descriptor stands for 4, a
// byte moved for 512 (1-wide heads instead of 128), so a block of a rank
// is 1 KiB as in qwen3-32b-h200; the engine programs get the same
// geometry.
func TestQwen3LayersPreset(t *testing.T) {
	p := qwen3H200Layers
	bytes, descs := p.scale()
	assert.Equal(t, 512.0, bytes)
	assert.Equal(t, 4.0, descs)
	assert.Equal(t, 24*time.Microsecond, p.postCost())
	assert.Equal(t, 16, p.Model.Layers)
	assert.Equal(t, qwen3H200.rankBlockBytes(), p.rankBlockBytes(), "1 KiB a block and rank in both")
	assert.Equal(t, uint64(32), (func() preset { q := p; q.PostPerBlock = true; return q })().postBlockBytes(), "16 tokens of one 2-byte head")
	assert.Equal(t, []string{"-model", "qwen3-32b", "-layers", "16", "-head-dim", "1", "-tp", "8", "-num-blocks", "65536",
		"-max-num-seqs", "256", "-served-model-name", "Qwen/Qwen3-32B"}, p.EngineArgs)
	assert.Equal(t, "1", qwen3H200.EngineArgs[3], "qwen3-32b-h200's own arguments untouched")
	// One block of a rank costs the same to post in both presets with
	// -post-per-block: 32 regions at 4 x 6 µs, or 2 at 64 x 6 µs.
	assert.Equal(t, 32*p.postCost(), 2*qwen3H200.postCost())
}

// Every mode has a colour of its own in the plots.
func TestModeColorsDiffer(t *testing.T) {
	seen := map[string]string{}
	for _, m := range []string{"pull", "pull-inline", "push", "push-progressive", "push-progressive-layers", "push-staged", "push-progressive-staged", "collocated"} {
		c, ok := modeColors[m]
		if !assert.True(t, ok, m) {
			continue
		}
		k := string([]byte{c.R, c.G, c.B})
		assert.Empty(t, seen[k], "%s has %s's colour", m, seen[k])
		seen[k] = m
	}
}
