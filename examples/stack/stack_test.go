package stack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

var tiny = server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 2, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 1}

// A stack whose prefill holds blocks no decode will read (a request sent to
// the prefill engine alone) closes at once, not after the lease, and logs
// its steps.
func TestCloseDoesNotWaitForHoldsNobodyReads(t *testing.T) {
	for _, mode := range Modes {
		t.Run(mode, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			s, err := Start(Config{Mode: mode, Model: tiny, NumBlocks: 64, Lease: time.Minute, Logger: zap.New(core)})
			require.NoError(t, err)
			params := map[string]any{"do_remote_decode": true}
			if mode == "push" {
				params = map[string]any{"do_remote_decode": true, "transfer_mode": "push", "transfer_id": "xfer-nobody"}
			}
			body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen", "max_tokens": 1, "kv_transfer_params": params})
			resp, err := http.Post(s.Prefill.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			require.NoError(t, err)
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode, "%s", out)
			require.Eventually(t, func() bool { return s.Prefill.Stats().BlocksInUse > 0 }, 5*time.Second, 5*time.Millisecond)

			start := time.Now()
			require.NoError(t, s.Close())
			assert.Less(t, time.Since(start), 2*time.Second, "Close waited for a hold nobody reads")
			released := logs.FilterMessage("engine closing: releasing blocks without waiting for decode engines to read the blocks held for them").All()
			require.Len(t, released, 1)
			assert.Equal(t, int64(1), released[0].ContextMap()["held_requests"])
			for _, m := range []string{"stack closing: waiting for the proxy's requests in flight", "stack closing: decode engine closed", "stack closing: prefill engine closed", "stack closed"} {
				assert.Equal(t, 1, logs.FilterMessage(m).Len(), m)
			}
			assert.NoError(t, s.Close(), "a second Close")
		})
	}
}

// A stack whose engines speak vLLM's protocol (vLLM's side channel and
// metadata, K and V packed per layer) serves a request through the proxy,
// with every byte of the KV decode loads verified.
func TestStackInVLLMProtocol(t *testing.T) {
	for _, mode := range []string{"pull", "pull-inline"} {
		t.Run(mode, func(t *testing.T) {
			s, err := Start(Config{Mode: mode, Model: tiny, NumBlocks: 64, Protocol: server.ProtocolVLLM})
			require.NoError(t, err)
			defer s.Close()
			body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen", "max_tokens": 4})
			resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			require.NoError(t, err)
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode, "%s", out)
			st := s.Decode.Stats()
			assert.Zero(t, st.KVVerifyFailures)
			assert.NotZero(t, st.KVBytesVerified)
		})
	}
}
