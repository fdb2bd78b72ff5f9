package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A whole sweep on loopback: every request of every point ends and
// succeeds, decode verified KV bytes at every point, and the files are
// complete.
func TestSweepEndToEnd(t *testing.T) {
	p := small
	p.Rates = []float64{40}
	p.InputLens = []int{32, 80}
	p.Prompts = func(float64) int { return 20 }
	dir := t.TempDir()
	var log bytes.Buffer
	res, err := sweep(context.Background(), sweepConfig{Preset: p, Goodput: slo{TTFT: 2000 * msd(1)}, Percentile: []float64{50, 99},
		Seed: 3, ResultDir: dir, Machine: "test", Command: "test", Log: &log})
	require.NoError(t, err)
	require.Len(t, res.Points, 8)
	assert.Equal(t, 2, res.CollocatedReplicas)
	for _, pt := range res.Points {
		assert.Equal(t, 20, pt.NumPrompts)
		assert.Equal(t, 20, pt.Completed, "%s %d", pt.Mode, pt.InputLen)
		assert.Zero(t, pt.Failed)
		assert.Zero(t, pt.KVVerifyFailures)
		if pt.Mode == "collocated" {
			assert.Zero(t, pt.KVBytesVerified, "collocated engines move no KV")
			assert.Zero(t, pt.Transfers)
		} else {
			assert.NotZero(t, pt.KVBytesVerified, "decode verified no KV: the proxy did not disaggregate")
			assert.NotZero(t, pt.Transfers)
		}
		assert.Positive(t, pt.Metrics["mean_ttft_ms"])
		assert.Positive(t, pt.Metrics["p99_tpot_ms"])
		require.NotNil(t, pt.RequestGoodput)

		b, err := os.ReadFile(filepath.Join(dir, pt.RunFile))
		require.NoError(t, err)
		var run result
		require.NoError(t, json.Unmarshal(b, &run))
		assert.Len(t, run.TTFTs, 20)
		assert.Len(t, run.ITLs, 20)
		assert.Equal(t, pt.Mode, run.Mode)
		for i, itl := range run.ITLs {
			assert.Len(t, itl, p.OutputLen-1, "request %d", i)
			assert.Equal(t, p.OutputLen, run.OutputLens[i])
			assert.Empty(t, run.Errors[i])
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	require.NoError(t, err)
	var back sweepResult
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, res.Points, back.Points)
	assert.Equal(t, []string{"pull", "pull-inline", "push", "collocated"}, back.Modes)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-plot", filepath.Join(dir, "sweep.json")}, &out, &bytes.Buffer{}))
	assert.Contains(t, out.String(), "plot: "+filepath.Join(dir, "ttft_ratio.svg"))
	assert.Contains(t, out.String(), "push/pull")
	assert.Contains(t, log.String(), "push        input    80 rate   40: 20/20 done")
	assert.Contains(t, log.String(), "collocated  input    80 rate   40: 20/20 done")
	assert.Contains(t, out.String(), "plot: "+filepath.Join(dir, "goodput.svg"))

	// -merge: run collocated again at one point of the grid and at a new
	// rate; every other point stays as it was.
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"-sweep", "-merge", "-modes", "collocated", "-rates", "40,60", "-input-lens", "32",
		"-goodput", "ttft:2000", "-seed", "3", "-result-dir", dir}, &out, &bytes.Buffer{}))
	merged, err := readSweep(filepath.Join(dir, "sweep.json"))
	require.NoError(t, err)
	assert.Equal(t, []string{"pull", "pull-inline", "push", "collocated"}, merged.Modes)
	assert.Equal(t, []float64{40, 60}, merged.Rates)
	assert.Equal(t, []int{32, 80}, merged.InputLens)
	require.Len(t, merged.Points, 9)
	for _, pt := range back.Points {
		got, ok := merged.lookup(pt.Mode, pt.RequestRate, pt.InputLen)
		require.True(t, ok)
		if pt.Mode == "collocated" && pt.InputLen == 32 {
			assert.NotEqual(t, pt.Duration, got.Duration, "ran again")
			continue
		}
		assert.Equal(t, pt, got, "kept")
	}
	_, ok := merged.lookup("collocated", 60, 32)
	assert.True(t, ok)
	assert.Equal(t, back.Command, merged.Command, "the base sweep's setting stays")
	require.Len(t, merged.Merged, 1)
	assert.Equal(t, []string{"collocated"}, merged.Merged[0].Modes)
	assert.NotEmpty(t, merged.Merged[0].Date)
	assert.Contains(t, out.String(), "plot: "+filepath.Join(dir, "goodput.svg"))
}

func TestMergeInto(t *testing.T) {
	base := fakeSweep()
	base.Command = "first"
	r := sweepResult{Date: "d", Command: "second", Machine: "m", Modes: []string{"collocated"}, Rates: []float64{4, 8}, InputLens: []int{1024},
		CollocatedReplicas: 2}
	m := mergeInto(base, r)
	assert.Equal(t, []string{"pull", "pull-inline", "push", "collocated"}, m.Modes)
	assert.Equal(t, []float64{1, 4, 8}, m.Rates)
	assert.Equal(t, []int{1024, 16384}, m.InputLens)
	assert.Equal(t, base.Points, m.Points)
	assert.Equal(t, "first", m.Command)
	assert.Equal(t, 2, m.CollocatedReplicas)
	assert.Equal(t, []merged{{Date: "d", Command: "second", Machine: "m", Modes: r.Modes, Rates: r.Rates, InputLens: r.InputLens}}, m.Merged)

	m.addPoint(point{Mode: "collocated", RequestRate: 8, InputLen: 1024, Duration: 1})
	m.addPoint(point{Mode: "pull", RequestRate: 8, InputLen: 1024, Duration: 2})
	assert.Len(t, m.Points, len(base.Points)+1)
	pt, _ := m.lookup("pull", 8, 1024)
	assert.Equal(t, 2.0, pt.Duration, "replaced in place")
	assert.Len(t, base.Points, 12, "base untouched")
	assert.Empty(t, base.Merged)
}

// The default run: no -base-url starts an in-process stack; it prints the
// summary and writes the run file.
func TestRunInProcess(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-mode", "pull", "-num-prompts", "12", "-request-rate", "50", "-random-input-len", "48",
		"-random-output-len", "6", "-goodput", "ttft:2000 tpot:30", "-metric-percentiles", "50,99", "-result-dir", dir, "-result-filename", "r.json"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Contains(t, out.String(), "Successful requests:                    12")
	assert.Contains(t, out.String(), "P99 TPOT (ms):")
	assert.Contains(t, errOut.String(), "bench 12/12 requests ended (0 failed)")
	var r result
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	assert.Equal(t, 12, r.Completed)
	assert.Equal(t, 72, r.TotalOutputTokens)
	assert.Equal(t, 50.0, r.RequestRate)
}

func TestPreflightInProcess(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-preflight", "-mode", "push", "-preflight-long-prompts", "2", "-preflight-long-len", "500"}, &out, &bytes.Buffer{})
	require.NoError(t, err)
	s := out.String()
	assert.Contains(t, s, "preflight: short request OK")
	assert.Contains(t, s, "preflight: long request 2 of 500 tokens OK")
	assert.Contains(t, s, "KV Transfer metrics: 4 transfers (2.0 per request)", "TP 2: one WRITE per rank per request")
	assert.Contains(t, s, "preflight: average transfer time per request")
}

func TestRunRejectsBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"-request-rate 0": `request rate "0": want a positive number or "inf"`,
		"-goodput ttft":   `goodput "ttft": want key:milliseconds, e.g. ttft:2000`,
		"-preset nope":    `preset "nope": want "qwen3-32b-h200", "qwen3-32b-h200-layers", "small", "swa-demo" or "hybrid-demo"`,
		"-sweep":          "-sweep needs -result-dir",
		"-sweep -base-url http://x -result-dir d":                  "-sweep starts its own stacks: drop -base-url",
		"-preflight -base-url http://127.0.0.1:1":                  "preflight: -engine-urls is required with -base-url (the engines' HTTP base URLs, whose /metrics carry the KV transfer metrics)",
		"-num-prompts 0 -base-url http://x":                        "number of prompts is 0, want >= 1",
		"-mode warp":                                               `mode "warp": want pull, pull-inline, push, push-progressive, push-progressive-layers, push-staged, push-progressive-staged or collocated`,
		"-sweep -result-dir d -modes pull,warp":                    `mode "warp": want pull, pull-inline, push, push-progressive, push-progressive-layers, push-staged, push-progressive-staged or collocated`,
		"-merge":                                                   "-merge is for -sweep",
		"-collocated-replicas 0":                                   "-collocated-replicas is 0, want > 0",
		"-sweep -result-dir d -merge":                              "-merge: open d/sweep.json: no such file or directory",
		"-sweep -result-dir d -agents processes -modes collocated": "-agents processes runs split stacks only: drop collocated from -modes",
	} {
		err := run(context.Background(), splitArgs(args), &bytes.Buffer{}, &bytes.Buffer{})
		assert.EqualError(t, err, want, args)
	}
}

func splitArgs(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}
