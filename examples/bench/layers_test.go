package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The per-layer preset keeps qwen3-32b-h200's modeled costs with the
// model's 64 layers in the engines' geometry: a descriptor stands for one,
// a byte moved for 128 (1-wide heads instead of 128), so the post cost is
// the modeled 6 µs a descriptor and the link the same in modeled bytes;
// the engine programs get the same geometry.
func TestQwen3LayersPreset(t *testing.T) {
	p := qwen3H200Layers
	bytes, descs := p.scale()
	assert.Equal(t, 128.0, bytes)
	assert.Equal(t, 1.0, descs)
	assert.Equal(t, 6*time.Microsecond, p.postCost())
	assert.Equal(t, 64, p.Model.Layers)
	assert.Equal(t, uint64(32), (func() preset { q := p; q.PostPerBlock = true; return q })().postBlockBytes(), "16 tokens of one 2-byte head")
	assert.Equal(t, []string{"-model", "qwen3-32b", "-layers", "64", "-head-dim", "1", "-tp", "8", "-num-blocks", "65536",
		"-max-num-seqs", "256", "-served-model-name", "Qwen/Qwen3-32B"}, p.EngineArgs)
	assert.Equal(t, "1", qwen3H200.EngineArgs[3], "qwen3-32b-h200's own arguments untouched")
	// One modeled block of a rank costs the same to post in both presets
	// with -post-per-block: 128 regions at 6 µs, or 2 at 64 x 6 µs.
	q := qwen3H200
	q.PostPerBlock = true
	assert.Equal(t, 128*p.postCost(), 2*q.postCost())
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
