package stack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// The serving stack answers through the proxy with push in vLLM's
// protocol: decode registers with vLLM's PUSH_REG over vLLM's side
// channel, prefill WRITEs with plain completions, and decode verifies
// every KV byte it got.
func TestStackPushInVLLMProtocol(t *testing.T) {
	s, err := Start(Config{Mode: "push", Model: tiny, NumBlocks: 64, Protocol: server.ProtocolVLLM})
	require.NoError(t, err)
	defer s.Close()
	for i := range 3 {
		body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen", "max_tokens": 4 + i})
		resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "%s", out)
	}
	st := s.Decode.Stats()
	assert.Zero(t, st.KVVerifyFailures)
	assert.NotZero(t, st.KVBytesVerified)
}
