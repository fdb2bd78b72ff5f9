package pushconn

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/internal/tracing/tracingtest"
)

// A traced request's WRITE records its post and transfer spans under
// prefill's hold span, direct or staged (the staged post span covers
// gathering and posting every chunk, and names how many there were).
func TestWriteSpans(t *testing.T) {
	for _, staged := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "staged"}[staged]
		t.Run(name, func(t *testing.T) {
			rec := &tracingtest.Recorder{}
			mode := connector.StagingOff
			if staged {
				mode = connector.StagingOn
			}
			m := newStagingMem(t, mode, 1, 64<<10)
			r := stagingRig(t, rigConfig{rank: func(c *Config) { c.TracerProvider = rec }}, m)
			p := r.producers[0]
			p.spans.Begin(tracingtest.Traced(), "req", tracing.Hold)
			pushOne(t, r, true, "req", "req", []int{9, 3, 30, 12}, []int{5, 40, 7, 22}, 64)
			holds := rec.Named(tracing.Hold)
			require.Len(t, holds, 1)
			hold := holds[0].SC.SpanID()
			posts, xfers := rec.Named(tracing.Post), rec.Named(tracing.Transfer)
			require.Len(t, posts, 1)
			require.Len(t, xfers, 1)
			require.Equal(t, hold, posts[0].Parent.SpanID())
			require.Equal(t, hold, xfers[0].Parent.SpanID())
			require.False(t, posts[0].Ended.Before(posts[0].Began))
			require.Equal(t, "connector", xfers[0].Attrs[tracing.AttrTimedBy].AsString(), "loopback agents capture no telemetry")
			chunks, ok := posts[0].Attrs["gonixl.staged_chunks"]
			require.Equal(t, staged, ok)
			if staged {
				require.Equal(t, int64(rigChunks), chunks.AsInt64())
			}
			p.spans.End("req", nil)
			require.Equal(t, 1, holds[0].Ends)
		})
	}
}
