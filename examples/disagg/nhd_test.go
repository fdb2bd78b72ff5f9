package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The main job with NHD blocks on both engines, and with NHD on prefill and
// HND on decode, the full-attention and the sliding-window model: every
// request done, KV verified on decode, no mismatch; the header and the
// three commands say the orders.
func TestMainJobNHD(t *testing.T) {
	for _, c := range []struct {
		model, decode, header string
	}{
		{"demo-4l", "", ", KV layout NHD)"},
		{"demo-4l", "HND", ", KV layout NHD on prefill, HND on decode)"},
		{"swa-demo", "HND", ", KV layout NHD on prefill, HND on decode)"},
	} {
		t.Run(c.model+"/decode-"+c.decode, func(t *testing.T) {
			var out bytes.Buffer
			o := options{model: c.model, modes: []string{"pull", "push"}, requests: 3, rate: 0, promptWords: 150, maxTokens: 3, link: "instant",
				served: c.model, kvLayout: "NHD", decodeKVLayout: c.decode, out: &out}
			require.NoError(t, run(context.Background(), o))
			text := out.String()
			require.Contains(t, text, "model "+c.model+c.header)
			for _, mode := range o.modes {
				line := ""
				for _, l := range strings.Split(text, "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] == mode {
						line = l
					}
				}
				require.NotEmpty(t, line, "no row for %s in\n%s", mode, text)
				f := strings.Fields(line)
				assert.Equal(t, "3/3", f[1], line)
				assert.NotEqual(t, "0", f[2], "KV bytes verified: %s", line)
				assert.Equal(t, "0", f[3], "KV mismatches: %s", line)
			}
			assert.Contains(t, text, "-side-channel-port 5600 -kv-layout NHD\n")
			if c.decode == "HND" {
				assert.Contains(t, text, "-side-channel-port 5601\n")
			} else {
				assert.Contains(t, text, "-side-channel-port 5601 -kv-layout NHD\n")
			}
		})
	}
}
