package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// slo is a goodput objective: a request counts towards goodput when every
// metric named here is at or below its bound (vLLM's --goodput).
type slo struct {
	TTFT, TPOT, E2EL time.Duration // zero: not part of the objective
}

// parseGoodput reads vLLM's --goodput syntax, "ttft:2000 tpot:30" (bounds
// in milliseconds; spaces or commas between pairs).
func parseGoodput(s string) (slo, error) {
	var g slo
	for _, kv := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return g, fmt.Errorf("goodput %q: want key:milliseconds, e.g. ttft:2000", kv)
		}
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || ms <= 0 || math.IsInf(ms, 0) {
			return g, fmt.Errorf("goodput %q: the bound must be a positive number of milliseconds", kv)
		}
		d := time.Duration(ms * float64(time.Millisecond))
		switch k {
		case "ttft":
			g.TTFT = d
		case "tpot":
			g.TPOT = d
		case "e2el":
			g.E2EL = d
		default:
			return g, fmt.Errorf("goodput %q: unknown metric %q, want ttft, tpot or e2el", kv, k)
		}
	}
	return g, nil
}

func (g slo) set() bool { return g.TTFT > 0 || g.TPOT > 0 || g.E2EL > 0 }

// String is the objective in --goodput syntax.
func (g slo) String() string {
	var parts []string
	for _, x := range []struct {
		k string
		d time.Duration
	}{{"ttft", g.TTFT}, {"tpot", g.TPOT}, {"e2el", g.E2EL}} {
		if x.d > 0 {
			parts = append(parts, fmt.Sprintf("%s:%g", x.k, float64(x.d)/float64(time.Millisecond)))
		}
	}
	return strings.Join(parts, " ")
}

// distribution is a metric's summary in milliseconds.
type distribution struct {
	Mean, Std, Median float64
	Percentiles       map[string]float64 // "p99" -> value
}

// summary is a run's metrics, defined exactly as vLLM's benchmark defines
// them: TPOT of a request is (latency - TTFT) / (output tokens - 1) and
// exists only for requests of more than one output token (a one-token
// request counts as TPOT 0 towards goodput); ITL pools every gap of every
// request; throughputs divide by the whole run's duration.
type summary struct {
	Completed, Failed     int
	TotalInput            int
	TotalOutput           int
	Duration              time.Duration
	RequestThroughput     float64 // completed requests per second
	RequestGoodput        float64 // requests within the SLO per second; NaN if no SLO
	GoodRequests          int
	OutputThroughput      float64 // output tokens per second
	TotalTokenThroughput  float64 // input + output tokens per second
	TTFT, TPOT, ITL, E2EL distribution
	PercentilesRequested  []float64
}

func summarize(samples []sample, dur time.Duration, goal slo, percentiles []float64) summary {
	s := summary{Duration: dur, PercentilesRequested: percentiles}
	var ttfts, tpots, itls, e2els []float64
	for _, x := range samples {
		if x.Err != nil {
			s.Failed++
			continue
		}
		s.Completed++
		s.TotalInput += x.PromptTokens
		s.TotalOutput += x.OutputTokens
		tpot := 0.0
		if x.OutputTokens > 1 {
			tpot = ms(x.Latency-x.TTFT) / float64(x.OutputTokens-1)
			tpots = append(tpots, tpot)
		}
		ttfts = append(ttfts, ms(x.TTFT))
		e2els = append(e2els, ms(x.Latency))
		for _, d := range x.ITL {
			itls = append(itls, ms(d))
		}
		if goal.set() && within(ms(x.TTFT), goal.TTFT) && within(tpot, goal.TPOT) && within(ms(x.Latency), goal.E2EL) {
			s.GoodRequests++
		}
	}
	sec := dur.Seconds()
	if sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.OutputThroughput = float64(s.TotalOutput) / sec
		s.TotalTokenThroughput = float64(s.TotalInput+s.TotalOutput) / sec
		s.RequestGoodput = float64(s.GoodRequests) / sec
	}
	if !goal.set() {
		s.RequestGoodput = math.NaN()
	}
	s.TTFT = distributionOf(ttfts, percentiles)
	s.TPOT = distributionOf(tpots, percentiles)
	s.ITL = distributionOf(itls, percentiles)
	s.E2EL = distributionOf(e2els, percentiles)
	return s
}

func within(v float64, bound time.Duration) bool { return bound <= 0 || v <= ms(bound) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// distributionOf summarizes xs as numpy would: an empty list counts as [0]
// (vLLM's np.mean(xs or 0)), the standard deviation is the population one.
func distributionOf(xs []float64, percentiles []float64) distribution {
	if len(xs) == 0 {
		xs = []float64{0}
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	d := distribution{Mean: mean, Std: math.Sqrt(sq / float64(len(xs))), Median: percentile(sorted, 50), Percentiles: map[string]float64{}}
	for _, p := range percentiles {
		d.Percentiles[percentileKey(p)] = percentile(sorted, p)
	}
	return d
}

// percentile is numpy's default (linear interpolation between the closest
// ranks) over sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(rank-float64(lo))
}

// percentileKey names a percentile as vLLM's result keys do: 99 -> "p99",
// 99.9 -> "p99.9".
func percentileKey(p float64) string { return "p" + strconv.FormatFloat(p, 'f', -1, 64) }

// parsePercentiles reads vLLM's --metric-percentiles, e.g. "50,90,99".
func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || p < 0 || p > 100 {
			return nil, fmt.Errorf("metric percentile %q: want a number in [0, 100]", f)
		}
		out = append(out, p)
	}
	return out, nil
}
