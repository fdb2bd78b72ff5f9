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
