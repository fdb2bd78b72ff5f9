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

func testStackPushProgressive(t *testing.T, protocol string) {
	s, err := Start(Config{Mode: ModePushProgressive, ProgressChunk: 16, Model: tiny, NumBlocks: 64, Protocol: protocol,
		Compute: server.ComputeModel{PrefillPerToken: 100_000}}) // 0.1 ms a token: chunks take time
	require.NoError(t, err)
	defer s.Close()
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
	resp, err := http.Get(s.Prefill.URL() + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^\S*progressive_writes\S* (\S+)$`).FindSubmatch(metrics)
	require.NotNil(t, m, "no progressive_writes in prefill's metrics")
	n, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	assert.Positive(t, n, "no progressive WRITE")
}

func TestProgressChunkNeedsPush(t *testing.T) {
	_, err := server.New(server.Config{Role: server.RolePrefill, Connector: server.ConnPull, Model: tiny, ProgressChunk: 16})
	require.ErrorContains(t, err, "progress reports need the push connector")
}
