package pullconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/connector"
)

// refusedPlain returns a prefill rank's refused_plain_completions.
func refusedPlain(p *Producer) uint64 {
	n, _ := p.Stats().Get("refused_plain_completions")
	return n
}

// Issue 35: in gonixl's protocol a plain "<id>:<n>" completion, which no
// gonixl decode of a pinning prefill sends, comes from some other agent
// (one that only fetched prefill's metadata). It used to release a hold
// that no decode had asked about yet; the real decode's pin was then
// answered "not held". Now it is refused, counted and logged, the hold
// keeps its lease, and the real decode loads every byte.
func TestForgedPlainCompletionKeepsTheHold(t *testing.T) {
	for _, tc := range []struct{ prefill, decode side }{
		{side{1, 16}, side{1, 16}},
		{side{1, 16}, side{2, 16}}, // the hold waits for two completions
		{side{2, 16}, side{1, 16}},
	} {
		t.Run(fmt.Sprintf("TP%d-%d", tc.prefill.tp, tc.decode.tp), func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			c := newCluster(t, clusterOpts{prefill: tc.prefill, decode: tc.decode,
				prefillCfg: func(cfg *Config) { cfg.Logger = zap.New(core) }})
			c.fill(1, []int{1, 2}, 32)
			p := c.finish("r", []int{1, 2})

			intruder, err := c.fab.NewAgent("intruder")
			require.NoError(t, err)
			t.Cleanup(func() { intruder.Close() })
			for _, pa := range c.pagents {
				require.NoError(t, loadPeer(intruder, pa))
				// "r:1" on a TP-1 decode's count, "r:2" as a TP-2 decode
				// says it: both forms a real decode would carry.
				for _, n := range []int{1, 2} {
					require.NoError(t, intruder.GenNotif(pa.Name(), fmt.Appendf(nil, "r:%d", n), nil))
				}
			}
			for i, pr := range c.prods {
				require.Eventually(t, func() bool { return refusedPlain(pr) == 2 || pr.Held() == 0 }, 10*time.Second, time.Millisecond)
				assert.Equal(t, 1, pr.Held(), "prefill rank %d: a forged plain completion released the hold", i)
				assert.Empty(t, pr.DrainFreed(), "prefill rank %d", i)
				assert.Equal(t, uint64(2), refusedPlain(pr), "prefill rank %d", i)
				s := pr.Stats()
				assert.Equal(t, uint64(0), s.UnknownNotifications+s.LateNotifications+s.MalformedNotifications, "prefill rank %d", i)
			}

			// The real decode loads every byte, and its keyed completions
			// release the hold.
			c.load("d", p, []int{5, 6})
			for i, res := range c.result("d") {
				require.NoError(t, res.Err, "decode rank %d", i)
			}
			c.verify(1, []int{5, 6}, 0, 32)
			for i, f := range c.freed(1) {
				assert.Equal(t, map[string]int{"r": 1}, f, "prefill rank %d", i)
			}
			for i, pr := range c.prods {
				assert.Equal(t, uint64(2), refusedPlain(pr), "prefill rank %d: the real decode's completions all counted", i)
			}

			// One warning per rank (the second is within the rate limit),
			// naming the sender and the id.
			warned := logs.FilterMessage("pullconn: plain completion refused: a decode of this engine names the hold it read").All()
			require.Len(t, warned, len(c.prods))
			for _, w := range warned {
				assert.Equal(t, zapcore.WarnLevel, w.Level)
				f := w.ContextMap()
				assert.Equal(t, "intruder", f["from"])
				assert.Equal(t, "r", f["request_id"])
			}
		})
	}
}

// In vLLM's protocol a decode sends only plain completions and never asks
// about a hold, and prefill cannot tell its agent from any other: a plain
// completion from any agent that loaded prefill's metadata counts, as in
// vLLM's own prefill (docs/vllm.md, "Guarantees in vLLM's protocol"). This
// pins down that documented limit.
func TestVLLMProtocolCountsPlainCompletionsFromAnyAgent(t *testing.T) {
	c := newCluster(t, clusterOpts{vllm: true})
	c.finish("r", []int{1, 2})
	intruder, err := c.fab.NewAgent("intruder")
	require.NoError(t, err)
	t.Cleanup(func() { intruder.Close() })
	require.NoError(t, loadPeer(intruder, c.pagents[0]))
	require.NoError(t, intruder.GenNotif(c.pagents[0].Name(), []byte("r:1"), nil))
	assert.Equal(t, map[string]int{"r": 1}, c.freed(1)[0], "released by the plain completion")
	assert.Equal(t, uint64(0), refusedPlain(c.prods[0]))
}

// The warning is rate limited on the rank's monotonic clock: a flood of
// forged completions gives one line per interval, which says how many it
// left out, while the counter counts every one.
func TestRefusedPlainCompletionWarningIsRateLimited(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	core, logs := observer.New(zap.WarnLevel)
	c := newCluster(t, clusterOpts{prefillCfg: func(cfg *Config) { cfg.Clock, cfg.Logger = clk, zap.New(core) }})
	c.finish("r", []int{1})
	intruder, err := c.fab.NewAgent("intruder")
	require.NoError(t, err)
	t.Cleanup(func() { intruder.Close() })
	require.NoError(t, loadPeer(intruder, c.pagents[0]))
	send := func(n int) {
		for range n {
			require.NoError(t, intruder.GenNotif(c.pagents[0].Name(), []byte("r:1"), nil))
		}
	}
	const msg = "pullconn: plain completion refused: a decode of this engine names the hold it read"
	send(5)
	// One poller goroutine handles them in turn: once the fifth is
	// counted, the first one's line is written.
	require.Eventually(t, func() bool { return refusedPlain(c.prods[0]) == 5 }, 10*time.Second, time.Millisecond)
	require.Len(t, logs.FilterMessage(msg).All(), 1)
	assert.Equal(t, uint64(0), logs.FilterMessage(msg).All()[0].ContextMap()["left_out"])

	clk.Advance(plainWarnEvery)
	send(1)
	// The counter moves before the line is written: wait for both.
	require.Eventually(t, func() bool { return refusedPlain(c.prods[0]) == 6 && logs.FilterMessage(msg).Len() == 2 }, 10*time.Second, time.Millisecond)
	all := logs.FilterMessage(msg).All()
	assert.Equal(t, uint64(4), all[1].ContextMap()["left_out"], "the four refused since the first line")
	assert.Equal(t, 1, c.prods[0].Held())
}
