package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/descriptors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The main job prints one row per mode, every request done and its KV
// verified.
func TestMainJobTable(t *testing.T) {
	var out bytes.Buffer
	o := options{modes: []string{"pull", "pull-inline", "push"}, requests: 6, rate: 0, promptWords: 64, maxTokens: 4, link: "modeled", served: demoModel.Name, out: &out}
	require.NoError(t, run(context.Background(), o))
	text := out.String()
	for _, mode := range o.modes {
		line := ""
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == mode {
				line = l
			}
		}
		require.NotEmpty(t, line, "no row for %s in\n%s", mode, text)
		f := strings.Fields(line)
		assert.Equal(t, "6/6", f[1], line)
		assert.NotEqual(t, "0", f[2], "KV bytes verified: %s", line)
		assert.Equal(t, "0", f[3], "KV mismatches: %s", line)
	}
	assert.Contains(t, text, "go run ./examples/proxy -prefill 127.0.0.1:8100 -decode 127.0.0.1:8200 -port 8192")
	o.link = "warp"
	assert.EqualError(t, run(context.Background(), o), `-link is "warp", want "instant" or "modeled"`)
}

func testStack(t *testing.T, mode string, mutate func(*stackConfig)) *demoStack {
	t.Helper()
	o := options{link: "modeled", served: demoModel.Name}
	cfg, err := o.stackConfig(mode)
	require.NoError(t, err)
	cfg.NumBlocks = 1024
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := startStack(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.close()) })
	return s
}

// blocksBack waits until neither engine holds a block.
func blocksBack(t *testing.T, s *demoStack) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Prefill.Stats().BlocksInUse == 0 && s.Decode.Stats().BlocksInUse == 0 },
		20*time.Second, 5*time.Millisecond, "blocks still held: prefill %d, decode %d", s.Prefill.Stats().BlocksInUse, s.Decode.Stats().BlocksInUse)
}

// A block corrupted on prefill after its KV was written reaches decode,
// which reports it and generates other text than the intact request.
func TestCorruptedBlockChangesTheOutputAndIsReported(t *testing.T) {
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			var corrupt atomic.Bool
			s := testStack(t, mode, func(c *stackConfig) {
				c.KVHook = func(_ string, rank int, l descriptors.Layout, blocks []int, mem []byte) {
					if corrupt.Load() && rank == 1 {
						mem[uint64(blocks[0])*l.BlockLen()] ^= 0xff // region 0 starts at mem[0]
					}
				}
			})
			ctx := context.Background()
			good := load(ctx, s.url(), demoModel.Name, 1, 0, 40, 6, 7)[0]
			require.NoError(t, good.err)
			corrupt.Store(true)
			bad := load(ctx, s.url(), demoModel.Name, 1, 0, 40, 6, 7)[0]
			require.NoError(t, bad.err)
			assert.NotEqual(t, good.text, bad.text, "a corrupted block must change the generated text")
			assert.Equal(t, uint64(1), s.Decode.Stats().KVVerifyFailures)
			blocksBack(t, s)
		})
	}
}

// A client that goes away mid-stream: both legs end, every block on both
// engines is released.
func TestClientDisconnectReleasesEveryBlock(t *testing.T) {
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			s := testStack(t, mode, nil)
			ctx, cancel := context.WithCancel(context.Background())
			body, _ := json.Marshal(map[string]any{"model": demoModel.Name, "prompt": promptText(3, 1, 64), "max_tokens": 400, "stream": true})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url()+"/v1/completions", bytes.NewReader(body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			buf := make([]byte, 64)
			_, err = resp.Body.Read(buf) // the first chunk: decode is generating
			require.NoError(t, err)
			// The engine's gauge is stored at the end of its loop's
			// iteration, after the token went out: wait for it (decode
			// has hundreds of modeled steps left) rather than read it at
			// once, which a busy machine loses.
			require.Eventually(t, func() bool { return s.Decode.Stats().BlocksInUse != 0 }, 10*time.Second, time.Millisecond,
				"decode holds no block while it streams")
			cancel()
			resp.Body.Close()
			blocksBack(t, s)
			assert.Eventually(t, func() bool { return s.Proxy.Stats().ClientCancelled == 1 }, 10*time.Second, 5*time.Millisecond)
		})
	}
}

// With the prefill engine gone the proxy answers with an OpenAI-style
// error at once, well within the handshake deadline.
func TestPrefillDownGivesAJSONError(t *testing.T) {
	s := testStack(t, "pull", nil)
	require.NoError(t, s.Prefill.Close(context.Background()))
	start := time.Now()
	body, _ := json.Marshal(map[string]any{"model": demoModel.Name, "prompt": "hello", "max_tokens": 2})
	resp, err := http.Post(s.url()+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, resp.StatusCode)
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.NotEmpty(t, e.Error.Message)
	assert.Equal(t, resp.StatusCode, e.Error.Code)
	assert.Less(t, time.Since(start), 5*time.Second, "within the handshake timeout")
}

// 500 requests at once through the proxy: each ends once, done, and every
// block is released on both engines (goleak checks the goroutines).
func TestFiveHundredConcurrentRequests(t *testing.T) {
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			s := testStack(t, mode, nil)
			before := s.Decode.Stats()
			out := load(context.Background(), s.url(), demoModel.Name, 500, 0, 16, 3, 11)
			seen := map[string]bool{}
			for _, smp := range out {
				require.NoError(t, smp.err, smp.requestID)
				require.False(t, seen[smp.requestID])
				seen[smp.requestID] = true
				assert.Equal(t, 3, smp.tokens)
			}
			after := s.Decode.Stats()
			assert.Equal(t, uint64(500), after.RequestsDone-before.RequestsDone)
			assert.Zero(t, after.KVVerifyFailures)
			blocksBack(t, s)
		})
	}
}

// -prefill-pp 2: a push prefill of 2 pipeline stages x TP 2 into decode TP
// 2, every request done with its KV verified; pull refuses it by name.
func TestMainJobPipelinePrefill(t *testing.T) {
	var out bytes.Buffer
	o := options{modes: []string{"push"}, requests: 6, rate: 0, promptWords: 64, maxTokens: 4, link: "modeled", served: demoModel.Name, prefillPP: 2, out: &out}
	require.NoError(t, run(context.Background(), o))
	text := out.String()
	assert.Contains(t, text, "prefill PP 2 x TP 2, decode TP 2")
	var row []string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "push" {
			row = f
		}
	}
	require.NotEmpty(t, row, text)
	assert.Equal(t, "6/6", row[1])
	assert.NotEqual(t, "0", row[2], "KV bytes verified")
	assert.Equal(t, "0", row[3], "KV mismatches")
	assert.Contains(t, text, "-role prefill -connector push")
	assert.Contains(t, text, " -pp 2 -port 8100")
	o.modes = []string{"pull"}
	assert.ErrorContains(t, run(context.Background(), o), `Config.PPSize is 2 with connector "pull": pipeline-parallel prefill needs the push connector`)
}
