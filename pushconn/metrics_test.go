package pushconn

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMetricsLogLine(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	r := newRig(t, rigConfig{rank: func(c *RankConfig) { c.Logger = log; c.StatsInterval = 5 * time.Millisecond }})
	pushOne(t, r, true, "m-1", "m-1", blocksFrom(0, 2), blocksFrom(2, 2), 32)
	line := func(role, want string) bool {
		for _, e := range logs.All() {
			if strings.HasPrefix(e.Message, "KV Transfer metrics:") && e.ContextMap()["role"] == role && strings.Contains(e.Message, want) {
				return true
			}
		}
		return false
	}
	eventually(t, "prefill metrics line", func() bool {
		return line("prefill", "transfers=1 ") && line("prefill", " registrations_received=1 ") && line("prefill", " matched_exact=1 ") && line("prefill", " push_fail_sent=0 ")
	})
	eventually(t, "decode metrics line", func() bool { return line("decode", " registrations_sent=1 ") })
}
