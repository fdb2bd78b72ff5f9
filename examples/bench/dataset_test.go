package main

import (
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/stretchr/testify/assert"
)

// Every prompt is exactly inputLen tokens for the engine's tokenizer, no
// two share even their first token, and a seed gives the same prompts.
func TestRandomPrompts(t *testing.T) {
	ps := randomPrompts(200, 37, 5)
	first := map[int]bool{}
	for _, p := range ps {
		toks := server.Tokenize(p)
		assert.Len(t, toks, 37)
		assert.Len(t, strings.Fields(p), 37)
		assert.False(t, first[toks[0]], "two prompts start with the same token")
		first[toks[0]] = true
	}
	assert.Equal(t, ps, randomPrompts(200, 37, 5))
	assert.NotEqual(t, ps[0], randomPrompts(1, 37, 6)[0])
	assert.Len(t, server.Tokenize(randomPrompts(1, 1, 1)[0]), 1)
}
