package main

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
)

// The main job runs the grouped model shapes in every mode: every request
// done, its KV (attention rows and Mamba state) verified on decode, no
// mismatch. The prompts (200 tokens) are longer than swa-demo's window
// (128), so its sliding-window group moves only the window's blocks.
func TestMainJobGroups(t *testing.T) {
	for _, model := range []string{"swa-demo", "hybrid-demo"} {
		t.Run(model, func(t *testing.T) {
			var out bytes.Buffer
			o := options{model: model, modes: []string{"pull", "pull-inline", "push"}, requests: 4, rate: 0, promptWords: 200, maxTokens: 4, link: "modeled", served: model, out: &out}
			require.NoError(t, run(context.Background(), o))
			text := out.String()
			require.Contains(t, text, "model "+model)
			for _, mode := range o.modes {
				line := ""
				for _, l := range strings.Split(text, "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] == mode {
						line = l
					}
				}
				require.NotEmpty(t, line, "no row for %s in\n%s", mode, text)
				f := strings.Fields(line)
				assert.Equal(t, "4/4", f[1], line)
				assert.NotEqual(t, "0", f[2], "KV bytes verified: %s", line)
				assert.Equal(t, "0", f[3], "KV mismatches: %s", line)
			}
			assert.Contains(t, text, "./examples/engine -role prefill -connector pull -model "+model)
		})
	}
	_, _, err := modelOf("mamba-9000")
	assert.EqualError(t, err, `-model is "mamba-9000", want demo-4l, swa-demo or hybrid-demo`)
}

// A Mamba state byte corrupted on prefill after the engine wrote it
// reaches decode, which reports it: decode verifies the state, not only
// the attention blocks.
func TestCorruptedStateIsReported(t *testing.T) {
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			var corrupt atomic.Bool
			s := testStack(t, mode, func(c *stackConfig) {
				c.Model, c.Compute, _ = modelOf("hybrid-demo")
				c.ServedModelName = "hybrid-demo"
				c.KVHook = func(_ string, rank int, l descriptors.Layout, blocks []int, mem []byte) {
					if !corrupt.Load() || rank != 1 {
						return
					}
					ssm := l.Groups[1]
					reg := ssm.Regions[1]
					slot := blocks[len(blocks)-1] // the engine's state slot: the last prompt block
					off := l.Regions[reg].Base - l.Regions[0].Base + uint64(slot)*l.BlockLenOf(reg) + uint64(ssm.SSM.Conv[0]) + 3
					mem[off] ^= 0xff // in conv part B
				}
			})
			ctx := context.Background()
			good := load(ctx, s.url(), "hybrid-demo", 1, 0, 40, 6, 7)[0]
			require.NoError(t, good.err)
			require.Zero(t, s.Decode.Stats().KVVerifyFailures)
			corrupt.Store(true)
			bad := load(ctx, s.url(), "hybrid-demo", 1, 0, 40, 6, 7)[0]
			require.NoError(t, bad.err)
			assert.NotEqual(t, good.text, bad.text, "a corrupted state byte must change the generated text")
			assert.Equal(t, uint64(1), s.Decode.Stats().KVVerifyFailures)
			blocksBack(t, s)
		})
	}
}
