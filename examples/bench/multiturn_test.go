package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The multi-turn sweep end to end on the small preset: both points run,
// the bidirectional one reads history back, every byte checks, and the
// file, the plot and the table come out.
func TestMultiTurnEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-multiturn", "-preset", "small", "-histories", "256", "-turns", "3", "-conversations", "2",
		"-conversation-rate", "0", "-random-output-len", "8", "-result-dir", dir}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	b, err := os.ReadFile(filepath.Join(dir, "multiturn.json"))
	require.NoError(t, err)
	var r multiTurnResult
	require.NoError(t, json.Unmarshal(b, &r))
	require.Len(t, r.Points, 2)
	off, on := r.point(256, false), r.point(256, true)
	require.NotNil(t, off)
	require.NotNil(t, on)
	for _, p := range r.Points {
		assert.Zero(t, p.Failed)
		assert.Zero(t, p.KVMismatches)
		assert.NotZero(t, p.KVBytesVerified)
		assert.Len(t, p.MeanTTFTms, 3)
	}
	assert.Zero(t, off.HistoryRead)
	// Turn 2 reads turn 1's prompt (116 words and 4 markers: 7 full
	// blocks), turn 3 turn 2's (248 tokens: 15 blocks), for 2 conversations.
	assert.Equal(t, uint64(2*(7+15)*16), on.HistoryRead)
	assert.Zero(t, on.HistoryRecomputed)
	assert.Contains(t, out.String(), "| 256 |")
	svg, err := os.ReadFile(filepath.Join(dir, "multiturn_ttft.svg"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(svg), "bidirectional"))
}

func TestMultiTurnFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-multiturn", "-turns", "1"}, &out, &errOut)
	assert.ErrorContains(t, err, "-turns is 1, want >= 2")
	err = run(context.Background(), []string{"-multiturn", "-histories", "8k"}, &out, &errOut)
	assert.ErrorContains(t, err, `-histories: "8k" is not a token count`)
}
