package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -modes pull,push: the pull-inline columns say "-", not 0.0.
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
	assert.Equal(t, strings.Fields("input rate pull TTFT inline push push/pull push/inline pull TPOT inline push"), strings.Fields(lines[0]))
	// input 1024, rate 1: pull 20.24, push 22.24 (fakeSweep's values).
	assert.Equal(t, []string{"1024", "1", "20.2", "-", "22.2", "1.10", "-", "0.20", "-", "0.22"}, strings.Fields(lines[1]))
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		assert.Equal(t, "-", f[3], l)
		assert.Equal(t, "-", f[6], l)
		assert.Equal(t, "-", f[8], l)
		assert.NotContains(t, l, " 0.0 ", l)
	}
}

func TestPrintRatiosAllModes(t *testing.T) {
	var out bytes.Buffer
	printRatios(&out, fakeSweep())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, []string{"1024", "1", "20.2", "21.2", "22.2", "1.10", "1.05", "0.20", "0.21", "0.22"}, strings.Fields(lines[1]))
	assert.NotContains(t, out.String(), " - ")
}
