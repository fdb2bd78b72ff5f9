package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func withCollocated(r sweepResult) sweepResult {
	r.Modes = append(r.Modes, "collocated")
	for _, n := range r.InputLens {
		for _, rate := range r.Rates {
			v := float64(n)/100 + rate*10 + 3
			g := rate / 4 // goodput: 0.25 at 1 QPS
			r.Points = append(r.Points, point{Mode: "collocated", RequestRate: rate, InputLen: n, RequestGoodput: &g,
				Metrics: map[string]float64{"mean_ttft_ms": v, "mean_tpot_ms": v / 100}})
		}
	}
	for i := range r.Points {
		if r.Points[i].RequestGoodput == nil {
			g := r.Points[i].RequestRate / 2 // 0.5 at 1 QPS
			r.Points[i].RequestGoodput = &g
		}
	}
	return r
}

var tableHead = strings.Fields("input rate pull TTFT inline push coll push/pull push/inline pull TPOT inline push coll pull good inline push coll pull/coll push/coll prog TTFT prog/push layers TTFT layers/push")

// -modes pull,push: the pull-inline and collocated columns say "-", not 0.0.
func TestPrintRatiosMissingModeIsADash(t *testing.T) {
	r := fakeSweep()
	r.Modes = []string{"pull", "push"}
	var kept []point
	for _, p := range r.Points {
		if p.Mode != "pull-inline" {
			kept = append(kept, p)
		}
	}
	r.Points = kept
	var out bytes.Buffer
	printRatios(&out, r)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1+len(r.InputLens)*len(r.Rates))
	assert.Equal(t, tableHead, strings.Fields(lines[0]))
	// input 1024, rate 1: pull 20.24, push 22.24 (fakeSweep's values); no
	// goodput SLO.
	assert.Equal(t, []string{"1024", "1", "20.2", "-", "22.2", "-", "1.10", "-", "0.20", "-", "0.22", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"}, strings.Fields(lines[1]))
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		for _, i := range []int{3, 5, 7, 9, 11} {
			assert.Equal(t, "-", f[i], l)
		}
		assert.NotContains(t, l, " 0.0 ", l)
	}
}

func TestPrintRatiosAllModes(t *testing.T) {
	var out bytes.Buffer
	printRatios(&out, withCollocated(fakeSweep()))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, tableHead, strings.Fields(lines[0]))
	// Goodput 0.5 for the split modes and 0.25 collocated at 1 QPS: 2.00.
	assert.Equal(t, []string{"1024", "1", "20.2", "21.2", "22.2", "23.2", "1.10", "1.05", "0.20", "0.21", "0.22", "0.23",
		"0.50", "0.50", "0.50", "0.25", "2.00", "2.00", "-", "-", "-", "-"}, strings.Fields(lines[1]))
}

// A sweep with progressive push, whole chunks and per layer: their mean
// TTFTs and their ratios to push's.
func TestPrintRatiosProgressive(t *testing.T) {
	r := fakeSweep()
	for _, p := range r.Points {
		if p.Mode == "push" {
			ttft := p.Metrics["mean_ttft_ms"]
			p.Mode = "push-progressive"
			p.Metrics = map[string]float64{"mean_ttft_ms": ttft / 2}
			r.Points = append(r.Points, p)
			p.Mode = "push-progressive-layers"
			p.Metrics = map[string]float64{"mean_ttft_ms": ttft / 4}
			r.Points = append(r.Points, p)
		}
	}
	r.Modes = append(r.Modes, "push-progressive", "push-progressive-layers")
	var out bytes.Buffer
	printRatios(&out, r)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, tableHead, strings.Fields(lines[0]))
	f := strings.Fields(lines[1])
	assert.Equal(t, []string{"22.2", "11.1", "0.50", "5.6", "0.25"}, []string{f[4], f[18], f[19], f[20], f[21]})
}

// A sweep of collocated alone: its columns only, no ratio.
func TestPrintRatiosCollocatedAlone(t *testing.T) {
	r := withCollocated(fakeSweep())
	r.Modes = []string{"collocated"}
	var kept []point
	for _, p := range r.Points {
		if p.Mode == "collocated" {
			kept = append(kept, p)
		}
	}
	r.Points = kept
	var out bytes.Buffer
	printRatios(&out, r)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, []string{"1024", "1", "-", "-", "-", "23.2", "-", "-", "-", "-", "-", "0.23", "-", "-", "-", "0.25", "-", "-", "-", "-", "-", "-"}, strings.Fields(lines[1]))
}
