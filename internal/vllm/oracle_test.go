package vllm

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/oracle"
	"github.com/gonixl/gonixl/internal/portpick"
)

// These tests run vLLM's own code (internal/oracle, the release
// .ci/vllm-oracle installs) against this package: the hash, the wire types,
// the side channel's listener and handshake client.

// oracleFactors is the JSON oracle.py's hash command reads.
func oracleFactors(f CompatFactors) string {
	b, _ := json.Marshal(map[string]any{
		"vllm_version": f.VLLMVersion, "connector_version": int(f.ConnectorVersion),
		"model": f.Model, "dtype": f.DType, "num_kv_heads": f.NumKVHeads, "head_size": f.HeadSize,
		"num_hidden_layers": f.NumHiddenLayers, "attn_backend_name": f.AttnBackendName,
		"cache_dtype": f.CacheDType, "is_hma_enabled": f.HMAEnabled, "transfer_mode": f.TransferMode,
	})
	return string(b)
}

// vLLM's compute_nixl_compatibility_hash, run on the same facts, gives the
// hash CompatFactors.Hash gives: plain and non-ASCII model names, pull and
// push, the hybrid manager on and off, at vLLM 0.34.0's own connector
// version (16) and at the older versions gonixl speaks (the hash reads the
// version when it runs).
func TestOracleHash(t *testing.T) {
	base := CompatFactors{ConnectorVersion: V16, VLLMVersion: "0.34.0", Model: "Qwen/Qwen3-0.6B", DType: "torch.bfloat16",
		AttnBackendName: "FLASH_ATTN", CacheDType: "auto", NumKVHeads: 8, HeadSize: 128, NumHiddenLayers: 28,
		HMAEnabled: true, TransferMode: TransferModePull}
	cases := map[string]func(*CompatFactors){
		"pull":      func(*CompatFactors) {},
		"push":      func(f *CompatFactors) { f.TransferMode = TransferModePush },
		"no HMA":    func(f *CompatFactors) { f.HMAEnabled = false },
		"non-ASCII": func(f *CompatFactors) { f.Model = "modèle/模型-😀" },
		"fp8 cache": func(f *CompatFactors) { f.CacheDType = "fp8_e4m3"; f.VLLMVersion = "0.33.0" },
		"older vLLM": func(f *CompatFactors) {
			f.VLLMVersion = "0.27.1"
			f.AttnBackendName = "FLASHINFER"
			f.ConnectorVersion = V12
		},
		"vLLM 0.33":    func(f *CompatFactors) { f.VLLMVersion = "0.33.0"; f.ConnectorVersion = V15 },
		"float16 MLA ": func(f *CompatFactors) { f.DType = "torch.float16"; f.NumKVHeads = 1; f.HeadSize = 576 },
	}
	var names []string
	var in strings.Builder
	for name := range cases {
		names = append(names, name)
	}
	all := make([]CompatFactors, len(names))
	for i, name := range names {
		all[i] = base
		cases[name](&all[i])
		in.WriteString(oracleFactors(all[i]) + "\n")
	}
	lines := oracle.Run(t, in.String(), "hash")
	require.Len(t, lines, len(names))
	for i, name := range names {
		var got struct{ Hash string }
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &got))
		assert.Equal(t, got.Hash, all[i].Hash(), "%s: vLLM's hash of %s", name, all[i].JSON())
	}
}

// oracleDecoded is oracle.py's answer to a payload: what vLLM's handshake
// client decodes, and its own encoding of the same values.
type oracleDecoded struct {
	Error             string
	Hash              string
	Metadata          map[string]any
	MetadataReencoded string `json:"metadata_reencoded"`
	PayloadReencoded  string `json:"payload_reencoded"`
}

// vLLM's msgspec decoders read what a gonixl rank of version 16 (vLLM
// 0.34.0's) publishes: head-major, token-major and MLA layouts, with the
// names a vLLM worker gives them and every region's layer; vLLM's encoder
// writes the same values back to the very bytes gonixl served.
func TestOracleDecodesPublishedMetadata(t *testing.T) {
	nhd := model
	nhd.Order = descriptors.OrderNHD
	mla := descriptors.Geometry{Layers: 2, KVHeads: 1, HeadDim: 576, DType: "bfloat16", BlockSize: 16, Blocks: 64, TPSize: 1, MLA: true}
	cases := []struct {
		name   string
		layout descriptors.Layout
		want   string
	}{
		{"HND", packedLayout(t, model, 1), LayoutLBHNC},
		{"NHD", packedLayout(t, nhd, 0), LayoutLBNHC},
		{"MLA", packedLayout(t, mla, 0), LayoutLBHNC},
	}
	var in strings.Builder
	var served [][]byte
	for _, c := range cases {
		s, err := ListenSide("127.0.0.1", 0, SideOptions{})
		require.NoError(t, err)
		require.NoError(t, PublishRank(s, "prefill-0", "h-"+c.name, Wire{Version: V16}, c.layout, []byte("agent-md"), "FLASH_ATTN", ""))
		rep, err := FetchSide(context.Background(), "127.0.0.1", s.Port(), 0, c.layout.TPRank, SideFetchOptions{})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		served = append(served, rep.Payload)
		in.WriteString(hex.EncodeToString(rep.Payload) + "\n")
	}
	lines := oracle.Run(t, in.String(), "decode")
	require.Len(t, lines, len(cases))
	for i, c := range cases {
		var d oracleDecoded
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &d))
		require.Empty(t, d.Error, c.name)
		assert.Equal(t, "h-"+c.name, d.Hash)
		assert.Equal(t, c.want, d.Metadata["kv_cache_layout"], c.name)
		assert.Equal(t, "prefill-0", d.Metadata["engine_id"])
		assert.Equal(t, hex.EncodeToString([]byte("agent-md")), d.Metadata["agent_metadata"])
		assert.Equal(t, float64(c.layout.BlockSize), d.Metadata["block_size"])
		assert.Len(t, d.Metadata["kv_caches_base_addr"], len(c.layout.Regions))
		assert.Len(t, d.Metadata["region_members"], len(c.layout.Regions), "%s: every region's layers, as version 16 requires", c.name)
		assert.Equal(t, hex.EncodeToString(served[i]), d.PayloadReencoded, "%s: vLLM's encoder writes gonixl's bytes", c.name)
		raw, err := hex.DecodeString(d.MetadataReencoded)
		require.NoError(t, err)
		back, err := DecodeAgentMetadata(raw, V16)
		require.NoError(t, err, c.name)
		got, err := LayoutOf(back, geometryOf(c.layout, c.name, model, nhd, mla), c.layout.TPRank, c.layout.TPSize)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.layout, got, c.name)
	}
}

func geometryOf(l descriptors.Layout, name string, hnd, nhd, mla descriptors.Geometry) descriptors.Geometry {
	switch name {
	case "NHD":
		return nhd
	case "MLA":
		return mla
	}
	return hnd
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := portpick.Pick()
	require.NoError(t, err)
	return p
}

// vLLM's handshake listener (NixlBaseConnectorScheduler's) serves the
// payloads of a two-rank engine; FetchPeer reads both ranks' layouts back.
func TestOracleListenerServesFetchPeer(t *testing.T) {
	noLeaks(t)
	const hash = "cafe"
	port := freePort(t)
	args := []string{"listen", fmt.Sprint(port)}
	var want []descriptors.Layout
	for rank := range 2 {
		l := packedLayout(t, model, rank)
		want = append(want, l)
		pub, err := ListenSide("127.0.0.1", 0, SideOptions{})
		require.NoError(t, err)
		require.NoError(t, PublishRank(pub, "prefill-0", hash, Wire{Version: V16}, l, []byte{byte(rank)}, "FLASH_ATTN", ""))
		rep, err := FetchSide(context.Background(), "127.0.0.1", pub.Port(), 0, rank, SideFetchOptions{})
		require.NoError(t, err)
		require.NoError(t, pub.Close())
		args = append(args, fmt.Sprintf("0:%d=%s", rank, hex.EncodeToString(rep.Payload)))
	}
	srv := oracle.Start(t, args...)
	require.Equal(t, "READY", srv.Next(t))
	peer, err := FetchPeer(context.Background(), "127.0.0.1", port, "prefill-0", hash, Wire{Version: V16}, model, 2, []int{0, 1}, SideFetchOptions{})
	require.NoError(t, err)
	require.Len(t, peer.Ranks, 2)
	for rank, r := range peer.Ranks {
		assert.Equal(t, want[rank], r.Layout)
		assert.Equal(t, []byte{byte(rank)}, r.AgentMetadata)
	}
	// A hash other than the served one is refused as vLLM's client
	// refuses it.
	_, err = FetchPeer(context.Background(), "127.0.0.1", port, "prefill-0", "beef", Wire{Version: V16}, model, 2, []int{0}, SideFetchOptions{})
	require.ErrorIs(t, err, ErrIncompatible)
	srv.Stop()
}

// oracleHandshake is oracle.py's answer to a handshake.
type oracleHandshake struct {
	Error  string
	Agents map[string]string
	Loaded []struct {
		Rank     int
		Metadata map[string]any
	}
}

// vLLM's handshake client (NixlBaseConnectorWorker._nixl_handshake) asks
// gonixl's side channel for every rank: it decodes the payloads, checks
// the hash and the engine id, and reads the layout name it compares with
// its own; a wrong hash or engine id is refused with vLLM's own message.
func TestOracleHandshakeWithGonixlSideChannel(t *testing.T) {
	noLeaks(t)
	const hash = "f00d"
	s, err := ListenSide("127.0.0.1", 0, SideOptions{})
	require.NoError(t, err)
	defer s.Close()
	for rank := range 2 {
		require.NoError(t, PublishRank(s, "prefill-0", hash, Wire{Version: V16}, packedLayout(t, model, rank), []byte{7, byte(rank)}, "FLASH_ATTN", ""))
	}
	ask := func(engineID, hash string, tp int) string {
		b, _ := json.Marshal(map[string]any{"host": "127.0.0.1", "port": s.Port(), "engine_id": engineID, "hash": hash, "tp_size": tp})
		return string(b) + "\n"
	}
	lines := oracle.Run(t, ask("prefill-0", hash, 2)+ask("prefill-0", "other", 1)+ask("prefill-9", hash, 1), "handshake")
	require.Len(t, lines, 3)
	var ok oracleHandshake
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &ok))
	require.Empty(t, ok.Error)
	assert.Equal(t, map[string]string{"0:0": "agent-0", "0:1": "agent-1"}, ok.Agents)
	require.Len(t, ok.Loaded, 2)
	for i, l := range ok.Loaded {
		assert.Equal(t, i, l.Rank)
		assert.Equal(t, LayoutLBHNC, l.Metadata["kv_cache_layout"])
		assert.Equal(t, hex.EncodeToString([]byte{7, byte(i)}), l.Metadata["agent_metadata"])
	}

	var bad oracleHandshake
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &bad))
	assert.Contains(t, bad.Error, "NIXL compatibility hash mismatch. Local: other, Remote: f00d.")
	bad = oracleHandshake{}
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &bad))
	assert.Contains(t, bad.Error, "Remote NIXL agent engine ID mismatch")
}
