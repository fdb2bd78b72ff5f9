package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func msd(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// The percentiles are numpy's default (linear) ones, as vLLM computes them.
func TestPercentileIsNumpysLinear(t *testing.T) {
	xs := []float64{1, 2, 3, 4}
	assert.InDelta(t, 2.5, percentile(xs, 50), 1e-12)
	assert.InDelta(t, 3.97, percentile(xs, 99), 1e-12) // rank 0.99*3 = 2.97
	assert.InDelta(t, 1, percentile(xs, 0), 1e-12)
	assert.InDelta(t, 4, percentile(xs, 100), 1e-12)
	assert.InDelta(t, 7, percentile([]float64{7}, 99), 1e-12)
	// numpy.percentile(range(1, 101), 90) == 90.1
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	assert.InDelta(t, 90.1, percentile(hundred, 90), 1e-9)
}

// TPOT excludes the first token: (latency - TTFT) / (output tokens - 1),
// only for requests of more than one token; ITL pools every gap.
func TestSummaryDefinitionsAreVLLMs(t *testing.T) {
	samples := []sample{
		{TTFT: msd(100), Latency: msd(190), OutputTokens: 10, PromptTokens: 50,
			ITL: []time.Duration{msd(10), msd(10), msd(10), msd(10), msd(10), msd(10), msd(10), msd(10), msd(10)}},
		{TTFT: msd(300), Latency: msd(300), OutputTokens: 1, PromptTokens: 50}, // one token: no TPOT
		{TTFT: msd(50), Latency: msd(110), OutputTokens: 4, PromptTokens: 50, ITL: []time.Duration{msd(10), msd(20), msd(30)}},
		{Err: assert.AnError, PromptTokens: 50},
	}
	s := summarize(samples, 2*time.Second, slo{TTFT: msd(200), TPOT: msd(15)}, []float64{99})
	assert.Equal(t, 3, s.Completed)
	assert.Equal(t, 1, s.Failed)
	assert.Equal(t, 150, s.TotalInput, "failed requests count no input")
	assert.Equal(t, 15, s.TotalOutput)
	assert.InDelta(t, 1.5, s.RequestThroughput, 1e-12)
	assert.InDelta(t, 7.5, s.OutputThroughput, 1e-12)
	assert.InDelta(t, 82.5, s.TotalTokenThroughput, 1e-12)
	// TPOTs: 90/9 = 10 and 60/3 = 20; the one-token request has none.
	assert.InDelta(t, 15, s.TPOT.Mean, 1e-9)
	assert.InDelta(t, 15, s.TPOT.Median, 1e-9)
	assert.InDelta(t, 19.9, s.TPOT.Percentiles["p99"], 1e-9)
	assert.InDelta(t, 5, s.TPOT.Std, 1e-9)
	assert.InDelta(t, 150, s.TTFT.Mean, 1e-9)
	assert.InDelta(t, 100, s.TTFT.Median, 1e-9)
	assert.InDelta(t, 190, s.E2EL.Median, 1e-9)
	// ITL: nine gaps of 10, then 10, 20, 30.
	assert.InDelta(t, 12.5, s.ITL.Mean, 1e-9)
	// Goodput: the first (TTFT 100, TPOT 10) is good; the one-token request
	// fails TTFT 300 > 200 although its TPOT counts as 0; the third has
	// TPOT 20 > 15.
	assert.Equal(t, 1, s.GoodRequests)
	assert.InDelta(t, 0.5, s.RequestGoodput, 1e-12)
}

func TestOneTokenRequestCountsTPOTZeroForGoodput(t *testing.T) {
	s := summarize([]sample{{TTFT: msd(100), Latency: msd(100), OutputTokens: 1}}, time.Second, slo{TPOT: msd(1)}, nil)
	assert.Equal(t, 1, s.GoodRequests)
	assert.InDelta(t, 0, s.TPOT.Mean, 0, "no TPOT sample: numpy's mean of [0]")
}

func TestNoGoodputWithoutSLO(t *testing.T) {
	s := summarize([]sample{{TTFT: msd(1), Latency: msd(2), OutputTokens: 2}}, time.Second, slo{}, nil)
	assert.True(t, math.IsNaN(s.RequestGoodput))
}

func TestParseGoodput(t *testing.T) {
	g, err := parseGoodput("ttft:2000 tpot:30")
	require.NoError(t, err)
	assert.Equal(t, slo{TTFT: 2 * time.Second, TPOT: 30 * time.Millisecond}, g)
	assert.Equal(t, "ttft:2000 tpot:30", g.String())
	g, err = parseGoodput("e2el:1.5,ttft:10")
	require.NoError(t, err)
	assert.Equal(t, slo{TTFT: 10 * time.Millisecond, E2EL: 1500 * time.Microsecond}, g)
	for in, want := range map[string]string{
		"ttft":         `goodput "ttft": want key:milliseconds, e.g. ttft:2000`,
		"ttft:-1":      `goodput "ttft:-1": the bound must be a positive number of milliseconds`,
		"ttft:x":       `goodput "ttft:x": the bound must be a positive number of milliseconds`,
		"latency:100":  `goodput "latency:100": unknown metric "latency", want ttft, tpot or e2el`,
		"tpot:30 ttft": `goodput "ttft": want key:milliseconds, e.g. ttft:2000`,
	} {
		_, err := parseGoodput(in)
		assert.EqualError(t, err, want, in)
	}
}

func TestParsePercentiles(t *testing.T) {
	p, err := parsePercentiles("50, 90,99.9")
	require.NoError(t, err)
	assert.Equal(t, []float64{50, 90, 99.9}, p)
	assert.Equal(t, "p99.9", percentileKey(99.9))
	_, err = parsePercentiles("101")
	assert.EqualError(t, err, `metric percentile "101": want a number in [0, 100]`)
}

func TestParseRate(t *testing.T) {
	r, err := parseRate("inf")
	require.NoError(t, err)
	assert.True(t, math.IsInf(r, 1))
	r, err = parseRate("2.5")
	require.NoError(t, err)
	assert.Equal(t, 2.5, r)
	for _, bad := range []string{"0", "-1", "x", "NaN"} {
		_, err := parseRate(bad)
		assert.EqualError(t, err, `request rate "`+bad+`": want a positive number or "inf"`)
	}
}
