package vllmpeer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// newEngine starts the reference engine in-process in pull and vLLM's
// protocol, with the test model, on fab's agents.
func newEngine(t *testing.T, fab *loopback.Fabric, role, id string, tp int) *server.Server {
	t.Helper()
	s, err := server.New(server.Config{Role: role, Connector: server.ConnPull, Protocol: server.ProtocolVLLM, EngineID: id,
		VLLMVersion: vllmVersion, VLLMConnectorVersion: vllmpeer.ConnectorVersion, AttentionBackend: vllmpeer.DefaultAttnBackend, TPSize: tp, NumBlocks: testModel.NumBlocks,
		Model: server.ModelSpec{Name: testModel.Name, Layers: testModel.Layers, KVHeads: testModel.KVHeads, HeadDim: testModel.HeadDim,
			DTypeBytes: testModel.ElemBytes, DType: testModel.DType, BlockSize: testModel.BlockSize},
		NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

type completion struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
}

func complete(t *testing.T, url string, body map[string]any) completion {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var c completion
	require.NoError(t, json.Unmarshal(raw, &c), "%s", raw)
	return c
}

// The peer, as a vLLM decode, pulls what the reference engine prefilled,
// and checks every byte against the fill of docs/kvfill.md: the peer's own
// tokenizer and fill agree with the engine's.
func TestPeerDecodeFromReferenceEngine(t *testing.T) {
	for _, tc := range tpCases {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric(t)
			eng := newEngine(t, fab, server.RolePrefill, "prefill", tc.prefill)
			dec := newPeer(t, fab, "decode", tc.decode, vllmpeer.ModePull)
			text, toks := prompt(70)
			c := complete(t, eng.URL(), map[string]any{"model": testModel.Name, "prompt": text, "max_tokens": 1,
				"kv_transfer_params": map[string]any{"do_remote_decode": true}})
			prm, err := vllmpeer.ParseParams(c.KVTransferParams)
			require.NoError(t, err, "%s", c.KVTransferParams)
			require.Len(t, prm.RemoteBlockIDs[0], 5)
			local := blocksFrom(30, 5)
			_, err = dec.Pull(context.Background(), "dreq-1", prm, local)
			require.NoError(t, err)
			check := dec.Verify(toks, local)
			require.Zero(t, check.BadBytes, check.First)
			assert.Equal(t, uint64(5*testModel.BlockSize*testModel.KVHeads*testModel.Layers*2*testModel.HeadDim*testModel.ElemBytes), check.OKBytes)
			require.Eventually(t, func() bool { return eng.Stats().BlocksInUse == 0 }, 10*time.Second, 5*time.Millisecond,
				"the engine frees the blocks on the peer's completions")
		})
	}
}

// The reference engine, as a gonixl decode in vLLM's protocol, pulls what
// the peer prefilled with the fill of docs/kvfill.md and finds 0
// mismatched bytes; its output equals the same prompt served locally (the
// text follows from the KV bytes decode holds). The peer sees exactly the
// completions vLLM's decode would send.
func TestReferenceEngineDecodeFromPeer(t *testing.T) {
	for _, tc := range tpCases {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric(t)
			pre := newPeer(t, fab, "prefill", tc.prefill, vllmpeer.ModePull)
			eng := newEngine(t, fab, server.RoleDecode, "decode", tc.decode)
			text, toks := prompt(70)
			prm, err := pre.Prefill("cmpl-1-0a1b2c3d", toks, blocksFrom(3, 5))
			require.NoError(t, err)
			got := complete(t, eng.URL(), map[string]any{"model": testModel.Name, "prompt": text, "max_tokens": 6,
				"kv_transfer_params": json.RawMessage(prm.JSON())}) // vLLM's exact kv_transfer_params
			st := eng.Stats()
			assert.Zero(t, st.KVVerifyFailures)
			assert.Equal(t, uint64(5*testModel.BlockSize*testModel.KVHeads*testModel.Layers*2*testModel.HeadDim*testModel.ElemBytes), st.KVBytesVerified)
			local := complete(t, eng.URL(), map[string]any{"model": testModel.Name, "prompt": text, "max_tokens": 6})
			assert.Equal(t, local.Choices[0].Text, got.Choices[0].Text)
			require.NoError(t, pre.WaitFreed("cmpl-1-0a1b2c3d", 10*time.Second))
			rep := pre.Report()
			for r := range tc.prefill {
				want := make([]string, tc.n)
				for i := range want {
					want[i] = fmt.Sprintf("cmpl-1-0a1b2c3d:%d", tc.n)
				}
				assert.Equal(t, want, completions(rep, r), "prefill rank %d", r)
			}
			assert.Empty(t, rep.Problems)
		})
	}
}
