package vllm

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// wireVectors is testdata/vllm/vectors.json.
type wireVectors struct {
	Source                  string            `json:"source"`
	MetaRequests            []requestVector   `json:"meta_requests"`
	MetaRequestsDecodeOnly  []requestVector   `json:"meta_requests_decode_only"`
	MetaRequestsInvalid     []invalidVector   `json:"meta_requests_invalid"`
	Timestamps              []timestampVector `json:"timestamps"`
	TimestampsDecodeOnly    []timestampVector `json:"timestamps_decode_only"`
	TimestampsInvalid       []invalidVector   `json:"timestamps_invalid"`
	Hashes                  []hashVector      `json:"hashes"`
	AgentMetadata           []metadataVector  `json:"agent_metadata"`
	AgentMetadataDecodeOnly []metadataVector  `json:"agent_metadata_decode_only"`
	AgentMetadataInvalid    []invalidVector   `json:"agent_metadata_invalid"`
	Payloads                []payloadVector   `json:"handshake_payloads"`
	PayloadsInvalid         []invalidVector   `json:"handshake_payloads_invalid"`
}

type requestVector struct {
	Name string `json:"name"`
	PP   int    `json:"pp"`
	TP   int    `json:"tp"`
	Hex  string `json:"hex"`
}

type timestampVector struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Hex     string  `json:"hex"`
}

type invalidVector struct {
	Name  string `json:"name"`
	Hex   string `json:"hex"`
	Error string `json:"error"`
}

type hashVector struct {
	Name    string        `json:"name"`
	Factors factorsVector `json:"factors"`
	JSON    string        `json:"json"`
	SHA256  string        `json:"sha256"`
}

type factorsVector struct {
	VLLMVersion       string      `json:"vllm_version"`
	Model             string      `json:"model"`
	DType             string      `json:"dtype"`
	AttnBackendName   string      `json:"attn_backend_name"`
	CacheDType        string      `json:"cache_dtype"`
	NumKVHeads        int         `json:"num_kv_heads"`
	HeadSize          int         `json:"head_size"`
	NumHiddenLayers   int         `json:"num_hidden_layers"`
	HMAEnabled        bool        `json:"is_hma_enabled"`
	ConnectorVersion  int         `json:"nixl_connector_version"`
	SpeculativeConfig *specVector `json:"speculative_config"`
	TransferMode      string      `json:"transfer_mode"`
}

type specVector struct {
	Method            string  `json:"method"`
	Model             string  `json:"model"`
	Revision          *string `json:"revision"`
	CodeRevision      *string `json:"code_revision"`
	ParallelDrafting  bool    `json:"parallel_drafting"`
	KVCacheDType      string  `json:"kv_cache_dtype"`
	AuxiliaryLayerIDs []int   `json:"auxiliary_layer_ids"`
}

func (f factorsVector) factors() CompatFactors {
	c := CompatFactors{
		ConnectorVersion: Version(f.ConnectorVersion),
		VLLMVersion:      f.VLLMVersion, Model: f.Model, DType: f.DType, AttnBackendName: f.AttnBackendName,
		CacheDType: f.CacheDType, NumKVHeads: f.NumKVHeads, HeadSize: f.HeadSize,
		NumHiddenLayers: f.NumHiddenLayers, HMAEnabled: f.HMAEnabled, TransferMode: f.TransferMode,
	}
	if s := f.SpeculativeConfig; s != nil {
		c.SpeculativeConfig = &SpeculativeConfig{
			Method: s.Method, Model: s.Model, Revision: s.Revision, CodeRevision: s.CodeRevision,
			ParallelDrafting: s.ParallelDrafting, KVCacheDType: s.KVCacheDType, AuxiliaryLayerIDs: s.AuxiliaryLayerIDs,
		}
	}
	return c
}

// metadataValue is an AgentMetadata in the vectors' JSON, keyed as on the
// wire; JSON null is None, agent_metadata is hex.
type metadataValue struct {
	EngineID                 string     `json:"engine_id"`
	AgentMetadata            string     `json:"agent_metadata"`
	KVCachesBaseAddr         []uint64   `json:"kv_caches_base_addr"`
	DeviceID                 int        `json:"device_id"`
	NumBlocks                int        `json:"num_blocks"`
	BlockLens                []uint64   `json:"block_lens"`
	BlockStrides             []uint64   `json:"block_strides"`
	KVCacheLayout            string     `json:"kv_cache_layout"`
	BlockSize                int        `json:"block_size"`
	SSMSizes                 [2]uint64  `json:"ssm_sizes"`
	AttnBackendName          string     `json:"attn_backend_name"`
	PhysicalBlocksPerLogical int        `json:"physical_blocks_per_logical_kv_block"`
	RegionNumBlocks          []int      `json:"region_num_blocks"`
	RegionGroupIDs           []int      `json:"region_group_ids"`
	RegionNames              []string   `json:"region_names"`
	RegionMemTypes           []string   `json:"region_mem_types"`
	DCPSize                  int        `json:"dcp_size"`
	PCPSize                  int        `json:"pcp_size"`
	RegionMembers            [][]string `json:"region_members"`
}

// metadata converts v as DecodeAgentMetadata returns it: nil for the empty
// lists and bytes that have no None.
func (v metadataValue) metadata(t *testing.T) *AgentMetadata {
	t.Helper()
	agent, err := hex.DecodeString(v.AgentMetadata)
	require.NoError(t, err)
	m := &AgentMetadata{
		EngineID: v.EngineID, AgentMetadata: agent, KVCachesBaseAddr: v.KVCachesBaseAddr,
		DeviceID: v.DeviceID, NumBlocks: v.NumBlocks, BlockLens: v.BlockLens, BlockStrides: v.BlockStrides,
		KVCacheLayout: v.KVCacheLayout, BlockSize: v.BlockSize, SSMSizes: v.SSMSizes,
		AttnBackendName: v.AttnBackendName, PhysicalBlocksPerLogical: v.PhysicalBlocksPerLogical,
		RegionNumBlocks: v.RegionNumBlocks, RegionGroupIDs: v.RegionGroupIDs, RegionNames: v.RegionNames,
		RegionMemTypes: v.RegionMemTypes, DCPSize: v.DCPSize, PCPSize: v.PCPSize, RegionMembers: v.RegionMembers,
	}
	if len(m.AgentMetadata) == 0 {
		m.AgentMetadata = nil
	}
	if len(m.KVCachesBaseAddr) == 0 {
		m.KVCachesBaseAddr = nil
	}
	if len(m.BlockLens) == 0 {
		m.BlockLens = nil
	}
	if len(m.BlockStrides) == 0 {
		m.BlockStrides = nil
	}
	if len(m.RegionMembers) == 0 {
		m.RegionMembers = nil
	}
	return m
}

type metadataVector struct {
	Name  string        `json:"name"`
	Value metadataValue `json:"value"`
	Hex   string        `json:"hex"`
	Bytes int           `json:"bytes"`
}

type payloadVector struct {
	Name              string `json:"name"`
	CompatibilityHash string `json:"compatibility_hash"`
	AgentMetadataHex  string `json:"agent_metadata_hex"`
	Hex               string `json:"hex"`
	DecodeOnly        bool   `json:"decode_only"`
}

func loadWireVectors(t testing.TB) *wireVectors {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/vllm/vectors.json")
	require.NoError(t, err)
	var v wireVectors
	require.NoError(t, json.Unmarshal(raw, &v))
	require.Contains(t, v.Source, "not captured from a running vLLM")
	return &v
}

func mustUnhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestMetaRequestVectors(t *testing.T) {
	v := loadWireVectors(t)
	require.Len(t, v.MetaRequests, 3)
	for _, c := range v.MetaRequests {
		require.Equal(t, c.Hex, hex.EncodeToString(EncodeMetaRequest(c.PP, c.TP)), c.Name)
	}
	for _, c := range append(v.MetaRequests, v.MetaRequestsDecodeOnly...) {
		pp, tp, err := DecodeMetaRequest(mustUnhex(t, c.Hex))
		require.NoError(t, err, c.Name)
		require.Equal(t, [2]int{c.PP, c.TP}, [2]int{pp, tp}, c.Name)
	}
	require.Len(t, v.MetaRequestsInvalid, 6)
	for _, c := range v.MetaRequestsInvalid {
		_, _, err := DecodeMetaRequest(mustUnhex(t, c.Hex))
		require.ErrorIs(t, err, ErrMalformed, c.Name)
		require.ErrorContains(t, err, c.Error, c.Name)
	}
}

func TestTimestampVectors(t *testing.T) {
	v := loadWireVectors(t)
	require.Len(t, v.Timestamps, 2)
	for _, c := range v.Timestamps {
		require.Equal(t, c.Hex, hex.EncodeToString(EncodeTimestamp(c.Seconds)), c.Name)
	}
	for _, c := range append(v.Timestamps, v.TimestampsDecodeOnly...) {
		got, err := DecodeTimestamp(mustUnhex(t, c.Hex))
		require.NoError(t, err, c.Name)
		require.Equal(t, c.Seconds, got, c.Name)
	}
	require.Len(t, v.TimestampsInvalid, 6)
	for _, c := range v.TimestampsInvalid {
		_, err := DecodeTimestamp(mustUnhex(t, c.Hex))
		require.ErrorIs(t, err, ErrMalformed, c.Name)
		require.ErrorContains(t, err, c.Error, c.Name)
	}
}

func TestHashVectors(t *testing.T) {
	v := loadWireVectors(t)
	require.Len(t, v.Hashes, 5)
	for _, c := range v.Hashes {
		f := c.Factors.factors()
		require.Equal(t, c.JSON, f.JSON(), c.Name)
		require.Equal(t, c.SHA256, f.Hash(), c.Name)
	}
}

func TestAgentMetadataVectors(t *testing.T) {
	v := loadWireVectors(t)
	require.Len(t, v.AgentMetadata, 2)
	for _, c := range v.AgentMetadata {
		want := c.Value.metadata(t)
		enc := want.Encode(V12)
		require.Equal(t, c.Hex, hex.EncodeToString(enc), c.Name)
		require.Len(t, enc, c.Bytes, c.Name)
		got, err := DecodeAgentMetadata(enc, V12)
		require.NoError(t, err, c.Name)
		require.Equal(t, want, got, c.Name)
	}
	require.Equal(t, 347, v.AgentMetadata[0].Bytes, "the facts' worked example is 347 bytes")
	for _, c := range v.AgentMetadataDecodeOnly {
		got, err := DecodeAgentMetadata(mustUnhex(t, c.Hex), V12)
		require.NoError(t, err, c.Name)
		require.Equal(t, c.Value.metadata(t), got, c.Name)
	}
	require.Len(t, v.AgentMetadataInvalid, 24)
	for _, c := range v.AgentMetadataInvalid {
		got, err := DecodeAgentMetadata(mustUnhex(t, c.Hex), V12)
		require.ErrorIs(t, err, ErrMalformed, c.Name)
		require.ErrorContains(t, err, c.Error, c.Name)
		require.Nil(t, got, c.Name)
	}
}

func TestHandshakePayloadVectors(t *testing.T) {
	v := loadWireVectors(t)
	require.Len(t, v.Payloads, 2)
	for _, c := range v.Payloads {
		want := &HandshakePayload{CompatibilityHash: c.CompatibilityHash, AgentMetadataBytes: mustUnhex(t, c.AgentMetadataHex)}
		if !c.DecodeOnly {
			require.Equal(t, c.Hex, hex.EncodeToString(want.Encode()), c.Name)
		}
		got, err := DecodeHandshakePayload(mustUnhex(t, c.Hex))
		require.NoError(t, err, c.Name)
		require.Equal(t, want, got, c.Name)
		md, err := got.Metadata(v.Hashes[0].SHA256, V12)
		require.NoError(t, err, c.Name)
		require.Equal(t, v.AgentMetadata[0].Value.metadata(t), md, c.Name)
	}
	require.Equal(t, v.Hashes[0].SHA256, v.Payloads[0].CompatibilityHash, "the payload carries ex1's hash")
	require.Len(t, v.PayloadsInvalid, 3)
	for _, c := range v.PayloadsInvalid {
		_, err := DecodeHandshakePayload(mustUnhex(t, c.Hex))
		require.ErrorIs(t, err, ErrMalformed, c.Name)
		require.ErrorContains(t, err, c.Error, c.Name)
	}
}
