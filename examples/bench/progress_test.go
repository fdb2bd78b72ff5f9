package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Not a terminal: a line at every tenth of the run and at its end.
func TestProgressPlainLines(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, 20, "run")
	assert.False(t, p.tty)
	for i := range 20 {
		p.add(i == 3)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	assert.Len(t, lines, 11, b.String()) // the first request, then one per tenth
	assert.True(t, strings.HasPrefix(lines[len(lines)-1], "run 20/20 requests ended (1 failed) after "), lines[len(lines)-1])
	var nilBar *progress
	nilBar.add(true) // a run without progress output
}

// A terminal: one line redrawn in place, ended by a newline.
func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, 4, "run")
	p.tty = true
	for range 4 {
		p.add(false)
	}
	out := b.String()
	assert.Equal(t, 4, strings.Count(out, "\r"))
	assert.Contains(t, out, "run [=======                       ] 1/4 failed 0")
	assert.Contains(t, out, "run [==============================] 4/4 failed 0")
	assert.True(t, strings.HasSuffix(out, "\n"))
	assert.Equal(t, 1, strings.Count(out, "\n"))
}
