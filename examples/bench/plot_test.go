package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fakeSweep() sweepResult {
	r := sweepResult{Modes: []string{"pull", "pull-inline", "push"}, Rates: []float64{1, 8}, InputLens: []int{1024, 16384}}
	for _, n := range r.InputLens {
		for _, rate := range r.Rates {
			for i, m := range r.Modes {
				v := float64(n)/100 + rate*10 + float64(i)
				r.Points = append(r.Points, point{Mode: m, RequestRate: rate, InputLen: n,
					Metrics: map[string]float64{"mean_ttft_ms": v, "mean_tpot_ms": v / 100}})
			}
		}
	}
	return r
}

// texts returns every <text> element's content of an SVG, checking that
// the whole file parses as XML.
func svgTexts(t *testing.T, path string) []string {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := xml.NewDecoder(f)
	var texts []string
	inText := false
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "%s is not well-formed XML", path)
		switch x := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = x.Name.Local
			}
			inText = x.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(x)))
			}
		case xml.EndElement:
			inText = false
		}
	}
	require.Equal(t, "svg", root)
	return texts
}

func TestPlotsAreSVGWithTheSeries(t *testing.T) {
	dir := t.TempDir()
	files, err := writePlots(fakeSweep(), dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "ttft.svg"), filepath.Join(dir, "tpot.svg"), filepath.Join(dir, "ttft_ratio.svg")}, files)
	for _, f := range files[:2] {
		texts := svgTexts(t, f)
		for _, want := range []string{"input 1024 tokens", "input 16384 tokens", "pull", "pull-inline", "push", "request rate (req/s)"} {
			assert.Contains(t, texts, want, f)
		}
		// One legend per panel: each mode named twice.
		n := 0
		for _, x := range texts {
			if x == "push" {
				n++
			}
		}
		assert.Equal(t, 2, n, f)
	}
	texts := svgTexts(t, files[2])
	for _, want := range []string{"push / pull mean TTFT", "push / pull-inline mean TTFT", "input 1024", "input 16384", "published, 16k @ 8 QPS"} {
		assert.Contains(t, texts, want)
	}
}

// With collocated and a goodput SLO: collocated is a line of every panel
// of ttft.svg, tpot.svg and goodput.svg, beside the split modes.
func TestPlotsWithCollocated(t *testing.T) {
	dir := t.TempDir()
	r := withCollocated(fakeSweep())
	r.Goodput = "ttft:2000 tpot:30"
	files, err := writePlots(r, dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "ttft.svg"), filepath.Join(dir, "tpot.svg"), filepath.Join(dir, "goodput.svg"),
		filepath.Join(dir, "ttft_ratio.svg")}, files)
	for _, f := range files[:3] {
		texts := svgTexts(t, f)
		n := 0
		for _, x := range texts {
			if x == "collocated" {
				n++
			}
		}
		assert.Equal(t, 2, n, "%s: collocated in each panel's legend", f)
		for _, want := range []string{"pull", "pull-inline", "push"} {
			assert.Contains(t, texts, want, f)
		}
	}
	assert.Contains(t, svgTexts(t, files[2]), "goodput (req/s within ttft:2000 tpot:30)")
	assert.NotContains(t, svgTexts(t, files[3]), "collocated", "the ratio plot is push over the pull modes")
}

// A goodput panel leaves out points without a goodput rather than plot 0.
func TestGoodputPanelsSkipPointsWithout(t *testing.T) {
	r := withCollocated(fakeSweep())
	r.Points[0].RequestGoodput = nil
	panels, err := valuePanels(r, "goodput", goodput)
	require.NoError(t, err)
	require.Len(t, panels, 2)
	assert.InDelta(t, 4*1.1, panels[0].Y.Max, 1e-9, "the largest goodput, 8 QPS / 2")
	assert.False(t, hasGoodput(fakeSweep()))
	assert.True(t, hasGoodput(r))
}

func TestPlotsWithoutPushHaveNoRatio(t *testing.T) {
	r := fakeSweep()
	r.Modes = []string{"pull"}
	files, err := writePlots(r, t.TempDir())
	require.NoError(t, err)
	assert.Len(t, files, 2)
}

func TestPlotsOfNothingFail(t *testing.T) {
	_, err := writePlots(sweepResult{Modes: []string{"pull"}}, t.TempDir())
	assert.ErrorContains(t, err, "nothing to plot")
}

func TestPublishedMarkerOnlyOnAGridWithThePoint(t *testing.T) {
	r := fakeSweep()
	assert.True(t, hasPublishedPoint(r, "pull"))
	assert.True(t, hasPublishedPoint(r, "pull-inline"))

	small := fakeSweep()
	small.InputLens = []int{1024}
	var kept []point
	for _, p := range small.Points {
		if p.InputLen == 1024 {
			kept = append(kept, p)
		}
	}
	small.Points = kept
	assert.False(t, hasPublishedPoint(small, "pull"), "no 16k input")

	noRate := fakeSweep()
	noRate.Rates = []float64{1}
	kept = nil
	for _, p := range noRate.Points {
		if p.RequestRate == 1 {
			kept = append(kept, p)
		}
	}
	noRate.Points = kept
	assert.False(t, hasPublishedPoint(noRate, "pull"), "no 8 QPS")

	dir := t.TempDir()
	files, err := writePlots(small, dir)
	require.NoError(t, err)
	texts := svgTexts(t, files[2])
	assert.Contains(t, texts, "push / pull mean TTFT")
	assert.NotContains(t, texts, "published, 16k @ 8 QPS")
}

func TestMetricPanelsStartAtZero(t *testing.T) {
	lo, hi := yRange([]float64{10.2, 10.5, 10.3})
	assert.Equal(t, 0.0, lo)
	assert.InDelta(t, 11.55, hi, 1e-9)
	lo, hi = yRange(nil)
	assert.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi})
	lo, hi = yRange([]float64{0, 0})
	assert.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi})

	// A 256-token panel whose TPOTs differ by 3%: the axis still starts at 0.
	r := sweepResult{Modes: []string{"pull", "push"}, Rates: []float64{1, 2}, InputLens: []int{256}}
	for i, m := range r.Modes {
		for _, rate := range r.Rates {
			r.Points = append(r.Points, point{Mode: m, RequestRate: rate, InputLen: 256,
				Metrics: map[string]float64{"mean_tpot_ms": 30 + float64(i) + rate/10}})
		}
	}
	panels, err := metricPanels(r, "mean_tpot_ms", "mean TPOT (ms)")
	require.NoError(t, err)
	require.Len(t, panels, 1)
	assert.Equal(t, 0.0, panels[0].Y.Min)
	assert.InDelta(t, 31.2*1.1, panels[0].Y.Max, 1e-9)
}
