package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -render-tier on the small preset: both runs serve every request with the
// KV verified, and the render tier's row carries the proxy's hop timings.
func TestRenderTierEndToEnd(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-render-tier", "-preset", "small", "-mode", "pull", "-num-prompts", "4", "-request-rate", "inf",
		"-random-input-len", "64", "-random-output-len", "8", "-num-warmups", "1"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	text := out.String()
	var inproc, tier []string
	for _, l := range strings.Split(text, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 2 && f[0] == "in" && f[1] == "process":
			inproc = f
		case len(f) > 2 && f[0] == "render" && f[1] == "tier":
			tier = f
		}
	}
	require.NotNil(t, inproc, text)
	require.NotNil(t, tier, text)
	assert.Equal(t, "4/4", inproc[2], text)
	assert.Equal(t, "4/4", tier[2], text)
	assert.Equal(t, "0", tier[3], text)
	assert.Equal(t, "-", inproc[len(inproc)-1], "no hops in process: %s", text)
	assert.NotEqual(t, "-", tier[len(tier)-1], "the render tier's hops: %s", text)
	assert.Contains(t, text, "TTFT with the render tier minus without")

	err = run(context.Background(), []string{"-render-tier", "-mode", "collocated"}, &out, &errOut)
	assert.EqualError(t, err, `-render-tier needs a split -mode (pull, pull-inline, push), got "collocated"`)
}
