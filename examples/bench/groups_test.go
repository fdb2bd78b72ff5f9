package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sweep takes the grouped model shapes by the engine's preset names:
// every point done, decode verified the KV it got (attention and state),
// no verification failure. The input (200 tokens) is longer than
// swa-demo's window.
func TestSweepGroups(t *testing.T) {
	for _, name := range []string{"swa-demo", "hybrid-demo"} {
		t.Run(name, func(t *testing.T) {
			p, err := presetByName(name)
			require.NoError(t, err)
			p.Modes = []string{"pull", "push"}
			p.InputLens = []int{200}
			p.Prompts = func(float64) int { return 6 }
			var log bytes.Buffer
			res, err := sweep(context.Background(), sweepConfig{Preset: p, Goodput: slo{TTFT: 2000 * msd(1)}, Percentile: []float64{50},
				Seed: 3, ResultDir: t.TempDir(), Machine: "test", Command: "test", Log: &log})
			require.NoError(t, err)
			require.Len(t, res.Points, 2)
			for _, pt := range res.Points {
				assert.Equal(t, 6, pt.Completed, "%s", pt.Mode)
				assert.Zero(t, pt.Failed)
				assert.Zero(t, pt.KVVerifyFailures)
				assert.NotZero(t, pt.KVBytesVerified)
			}
		})
	}
}
