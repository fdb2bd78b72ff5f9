package stack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// TestStackPushProgressive: the prefill engine computes prompts in chunks
// of 16 tokens and reports each chunk's blocks to the connector, which
// moves them before the request finishes; decode verifies every byte.
// In vLLM's protocol too: decode cannot tell (the wire is unchanged).
func TestStackPushProgressive(t *testing.T) {
	for _, protocol := range []string{server.ProtocolGonixl, server.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) { testStackPushProgressive(t, protocol) })
	}
}

// TestStackPushStaged: the staged modes, whole (push-staged) and
// progressive (push-progressive-staged, each chunk's blocks gathered into a
// staging slot and written into decode's); decode verifies every byte and
// prefill's counters show the WRITEs went through the slots.
func TestStackPushStaged(t *testing.T) {
	for _, mode := range []string{ModePushStaged, ModePushProgressiveStaged} {
		t.Run(mode, func(t *testing.T) {
			s := testStackPush(t, mode, server.ProtocolGonixl)
			require.Positive(t, prefillCounter(t, s, "staged_transfers"), "no staged WRITE")
			if mode == ModePushProgressiveStaged {
				require.Positive(t, prefillCounter(t, s, "progressive_staged_writes"), "no staged progressive WRITE")
			}
		})
		// Staging is gonixl's own protocol: a stack that speaks vLLM's
		// is refused at the start, naming why.
		t.Run(mode+"/vllm", func(t *testing.T) {
			_, err := Start(Config{Mode: mode, Model: tiny, NumBlocks: 64, Protocol: server.ProtocolVLLM})
			require.ErrorContains(t, err, `RankConfig.Staging.Mode is "on": staging is gonixl's own protocol, and this engine speaks vLLM's`)
		})
	}
}

// TestStackPushProgressiveLayers: the prefill engine reports each chunk's
// blocks after each of the model's layers (FinalLayers), and the connector
// moves them layer range by layer range before the request finishes;
// decode verifies every byte, in both protocols.
func TestStackPushProgressiveLayers(t *testing.T) {
	for _, protocol := range []string{server.ProtocolGonixl, server.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) {
			s := testStackPush(t, ModePushProgressiveLayers, protocol)
			assert.Positive(t, prefillCounter(t, s, "progressive_writes"), "no progressive WRITE")
			// 6 chunks of 2 layers, the last chunk's last layer the
			// finish's: 11 reports a request, all taken.
			st := s.Prefill.Stats()
			assert.Equal(t, [2]uint64{3 * 11, 0}, [2]uint64{st.ProgressReports, st.ProgressRefused})
		})
	}
}

// TestStackPushProgressiveLayersStages: a prefill engine of 2 pipeline
// stages, a layer each: each stage's rank hears of its own layer only,
// and decode verifies every byte. Stage 0 takes a whole report after
// layer 0 of each of the 6 chunks, stage 1 after layer 1 of the first 5
// (the last one is the finish's): 11 a request.
func TestStackPushProgressiveLayersStages(t *testing.T) {
	s := testStackPushPP(t, ModePushProgressiveLayers, server.ProtocolGonixl, 2)
	st := s.Prefill.Stats()
	assert.Equal(t, [2]uint64{3 * 11, 0}, [2]uint64{st.ProgressReports, st.ProgressRefused})
}

func TestProgressLayersNeedPush(t *testing.T) {
	_, err := server.New(server.Config{Role: server.RolePrefill, Connector: server.ConnPull, Model: tiny, ProgressLayers: true})
	require.ErrorContains(t, err, "Config.ProgressLayers is set with connector \"pull\": progress reports need the push connector")
}

func testStackPushProgressive(t *testing.T, protocol string) {
	s := testStackPush(t, ModePushProgressive, protocol)
	assert.Positive(t, prefillCounter(t, s, "progressive_writes"), "no progressive WRITE")
	// 6 chunks, the last one the finish's: 5 reports a request, all taken.
	st := s.Prefill.Stats()
	assert.Equal(t, [2]uint64{3 * 5, 0}, [2]uint64{st.ProgressReports, st.ProgressRefused})
}

// prefillCounter reads one counter of the prefill engine's /metrics.
func prefillCounter(t *testing.T, s *Stack, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.Prefill.URL() + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^\S*` + name + `\S* (\S+)$`).FindSubmatch(metrics)
	require.NotNil(t, m, "no %s in prefill's metrics", name)
	n, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return n
}

// testStackPush sends three prompts of 6 blocks through a stack of the
// push mode, prefill computing in chunks of 16 tokens, and checks decode
// verified every byte.
func testStackPush(t *testing.T, mode, protocol string) *Stack {
	return testStackPushPP(t, mode, protocol, 1)
}

// testStackPushPP is testStackPush with a prefill engine of pp pipeline
// stages.
func testStackPushPP(t *testing.T, mode, protocol string, pp int) *Stack {
	s, err := Start(Config{Mode: mode, ProgressChunk: 16, Model: tiny, NumBlocks: 64, Protocol: protocol, PrefillPPSize: pp,
		Compute: server.ComputeModel{PrefillPerToken: 100_000}}) // 0.1 ms a token: chunks take time
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	prompt := strings.Repeat("one two three four five six seven eight ", 12) // 96 tokens: 6 blocks
	for i := range 3 {
		body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 3 + i})
		resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "%s", out)
	}
	st := s.Decode.Stats()
	assert.Zero(t, st.KVVerifyFailures)
	assert.NotZero(t, st.KVBytesVerified)
	assert.Equal(t, uint64(3), st.RequestsDone)
	return s
}

func TestProgressChunkNeedsPush(t *testing.T) {
	_, err := server.New(server.Config{Role: server.RolePrefill, Connector: server.ConnPull, Model: tiny, ProgressChunk: 16})
	require.ErrorContains(t, err, "progress reports need the push connector")
}
