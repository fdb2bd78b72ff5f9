package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -turns runs its conversations with bidirectional KV and without: every
// turn done, 0 KV mismatches, history read back only with it on, and the
// count printed.
func TestTurnsJob(t *testing.T) {
	var out bytes.Buffer
	o := options{turns: 3, requests: 3, rate: 0, promptWords: 100, maxTokens: 4, link: "modeled", served: demoModel.Name, out: &out}
	require.NoError(t, runTurns(context.Background(), o))
	text := out.String()
	rows := map[string][]string{}
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "pull, "); i >= 0 {
			name := strings.Fields(l[i:])
			rows[name[0]+" "+name[1]] = strings.Fields(l[i:])[2:]
		}
	}
	on, off := rows["pull, bidirectional"], rows["pull, history"]
	require.NotNil(t, on, text)
	require.NotNil(t, off, text)
	off = off[1:] // "recomputed"
	for _, r := range [][]string{on, off} {
		assert.Equal(t, "9/9", r[0], text)
		assert.Equal(t, "0", r[2], "KV mismatches: %s", text)
	}
	read, err := strconv.Atoi(on[3])
	require.NoError(t, err)
	// Turn 2 reads turn 1's prompt back (104 tokens: 6 full blocks), turn 3
	// turn 2's (212: 13 blocks), in 3 conversations.
	assert.Equal(t, 3*(6+13)*16, read, text)
	assert.Equal(t, "0", off[3], text)
	assert.Regexp(t, regexp.MustCompile(`prefill read \d+ history tokens back from decode instead of recomputing them`), text)
}
