package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -render: every request of every mode served through the render tier and
// in process, answered alike (run fails otherwise), the KV verified, and
// what was served shows reasoning and a tool call.
func TestMainJobRender(t *testing.T) {
	var out bytes.Buffer
	o := options{modes: []string{"pull", "push"}, requests: 8, promptWords: 32, maxTokens: 64, link: "modeled", served: demoModel.Name, render: true, out: &out}
	require.NoError(t, run(context.Background(), o))
	text := out.String()
	rows := 0
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || (f[0] != "pull" && f[0] != "push") {
			continue
		}
		rows++
		// mode, chat (two words), done, KV bytes verified, KV mismatches
		assert.Equal(t, "8/8", f[3], l)
		assert.NotEqual(t, "0", f[4], "KV bytes verified: %s", l)
		assert.Equal(t, "0", f[5], "KV mismatches: %s", l)
	}
	assert.Equal(t, 4, rows, "rows in\n%s", text)
	assert.Contains(t, text, "Every request answered alike with and without the render tier; decode verified the KV of each.")
	assert.Contains(t, text, `    reasoning: "The user asks for the weather, so I call the tool."`+"\n"+`    tool call: get_weather({"city": "Paris", "unit": "celsius"})`)
}
