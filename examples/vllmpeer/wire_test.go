package vllmpeer

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The hash vectors of docs/vllm.md, computed there with Python's json and
// hashlib.
func TestHashVectors(t *testing.T) {
	ex1 := HashFactors{VLLMVersion: "0.27.1", Model: "Qwen/Qwen3-0.6B", DType: "torch.bfloat16", NumKVHeads: 8, HeadSize: 128,
		NumHiddenLayers: 28, AttnBackendName: "FLASH_ATTN", CacheDType: "auto", HMAEnabled: true, TransferMode: "pull"}
	ex2, ex3, ex4 := ex1, ex1, ex1
	ex2.TransferMode = "push"
	ex3.HMAEnabled = false
	ex4.Speculative = map[string]any{"auxiliary_layer_ids": []int{1, 13, 24}, "code_revision": nil, "kv_cache_dtype": "auto",
		"method": "eagle3", "model": "org/draft", "parallel_drafting": false, "revision": nil}
	for _, tc := range []struct {
		f    HashFactors
		want string
	}{
		{ex1, "407674cde2de5934d995c8dac06fb687b73b3d66a25e6fdbd9d52d237c3b50a5"},
		{ex2, "24d36b0ac598b5dcab49b1c291d31bceb4652b5105c35a85083091f99dd88190"},
		{ex3, "52bf7c7e0758a35514b5b8f718bbe828fb16ab2362b1fa26a7732f1385d8a03b"},
		{ex4, "3d93461c87fee2e7fb94a04e1f7955db7bc1eefdd4a352283e7177cb4c91f245"},
	} {
		got, err := tc.f.Hash()
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%+v", tc.f)
	}
	// DEL is escaped too, as Python's ensure_ascii escapes all outside ' '..'~' (this
	// writer once kept it).
	s, err := pyJSON(map[string]any{"b": "é\"\n\U0001F600\x7f", "a": []any{1, nil, true}})
	require.NoError(t, err)
	assert.Equal(t, `{"a": [1, null, true], "b": "\u00e9\"\n\ud83d\ude00\u007f"}`, s)
}

func TestGetMetaRequest(t *testing.T) {
	b, err := getMetaRequest(0, 0)
	require.NoError(t, err)
	assert.Equal(t, "93c40c6765745f6d6574615f6d73670000", hex.EncodeToString(b))
	b, err = getMetaRequest(0, 3)
	require.NoError(t, err)
	assert.Equal(t, byte(3), b[len(b)-1])
	pp, tp, err := parseGetMeta(b)
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 3}, [2]int{pp, tp})
	// A str instead of bin is answered, as vLLM does.
	s, _ := msgpack.Marshal([]any{"get_meta_msg", 0, 1})
	_, tp, err = parseGetMeta(s)
	require.NoError(t, err)
	assert.Equal(t, 1, tp)
	for _, bad := range []any{[]any{[]byte("get_meta"), 0, 0}, []any{[]byte(getMetaMsg), 0}, []any{[]byte(getMetaMsg), "x", 0}, 7} {
		b, _ := msgpack.Marshal(bad)
		_, _, err := parseGetMeta(b)
		assert.Error(t, err, "%v", bad)
	}
}

// The worked encoding of docs/vllm.md's NixlAgentMetadata: 347 bytes, map16
// of 19 keys, every field written in declaration order.
func TestAgentMetadataEncoding(t *testing.T) {
	m := agentMetadata{EngineID: "e1", AgentMetadata: []byte{1, 2}, KVCachesBaseAddr: []uint64{0x7f0000000000}, NumBlocks: 1000,
		BlockLens: []uint64{65536}, BlockStrides: []uint64{65536}, KVCacheLayout: "LBHNC", BlockSize: 16, AttnBackendName: "FLASH_ATTN",
		PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1, RegionMembers: [][]string{}}
	b, err := encode(&m)
	require.NoError(t, err)
	assert.Len(t, b, 347)
	want := "de0013a9656e67696e655f6964a26531ae6167656e745f6d65746164617461c4020102b36b765f6361636865735f626173655f616464729" +
		"1cf00007f0000000000a96465766963655f696400aa6e756d5f626c6f636b73cd03e8"
	assert.Equal(t, want, hex.EncodeToString(b[:len(want)/2]))
	tail := "a8" + hex.EncodeToString([]byte("pcp_size")) + "01ae" + hex.EncodeToString([]byte("region_members")) + "90"
	assert.Equal(t, tail, hex.EncodeToString(b[len(b)-len(tail)/2:]))
	keys, err := mapKeys(b)
	require.NoError(t, err)
	assert.Equal(t, []string{"engine_id", "agent_metadata", "kv_caches_base_addr", "device_id", "num_blocks", "block_lens", "block_strides",
		"kv_cache_layout", "block_size", "ssm_sizes", "attn_backend_name", "physical_blocks_per_logical_kv_block", "region_num_blocks",
		"region_group_ids", "region_names", "region_mem_types", "dcp_size", "pcp_size", "region_members"}, keys)

	p, err := encode(&handshakePayload{CompatibilityHash: "407674cde2de5934d995c8dac06fb687b73b3d66a25e6fdbd9d52d237c3b50a5", AgentMetadataBytes: b})
	require.NoError(t, err)
	assert.Equal(t, "82b2636f6d7061746962696c6974795f68617368d940", hex.EncodeToString(p[:22]))
	assert.Equal(t, "b4"+hex.EncodeToString([]byte("agent_metadata_bytes"))+"c5015b", hex.EncodeToString(p[22+64:22+64+24]))
}

func TestTimestamp(t *testing.T) {
	b, err := msgpack.Marshal(12345.5)
	require.NoError(t, err)
	assert.Equal(t, "cb40c81cc000000000", hex.EncodeToString(b))
	v, err := parseTimestamp(b)
	require.NoError(t, err)
	assert.Equal(t, 12345.5, v)
	v, err = parseTimestamp([]byte{0x07})
	require.NoError(t, err)
	assert.Equal(t, 7.0, v)
	_, err = parseTimestamp([]byte{0xa1, 'x'})
	assert.EqualError(t, err, "vllmpeer: handshake timestamp frame holds a string, want a number")
}

// PUSH_REG's map has exactly vLLM's 11 keys, in its order.
func TestPushRegKeys(t *testing.T) {
	b, err := encode(&pushReg{RequestID: "r", LocalBlockIDs: [][]int{{1, 2}}, RemotePPSize: 1})
	require.NoError(t, err)
	assert.Equal(t, byte(0x8b), b[0])
	keys, err := mapKeys(b)
	require.NoError(t, err)
	assert.Equal(t, []string{"request_id", "decode_engine_id", "decode_host", "decode_port", "decode_tp_size", "local_block_ids",
		"remote_engine_id", "remote_host", "remote_port", "remote_tp_size", "remote_pp_size"}, keys)
}

func TestMatches(t *testing.T) {
	assert.True(t, matches("cmpl-1-0a1b2c3d", "cmpl-1-DEADBEEF"))
	assert.True(t, matches("x", "x"))
	assert.False(t, matches("cmpl-1-0a1b2c3d", "cmpl-2-0a1b2c3d"))
	assert.False(t, matches("cmpl-1-0a1b2c3", "cmpl-1-0a1b2c3d"))
}

func TestParseParams(t *testing.T) {
	p, err := ParseParams([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[3,4]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600,"tp_size":2,"remote_blocks_expiry_time":null}`))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{3, 4}}, p.RemoteBlockIDs)
	assert.False(t, p.FlatBlockIDs)
	assert.Equal(t, 1, p.PPSize)
	p, err = ParseParams([]byte(`{"do_remote_prefill":true,"remote_block_ids":[3,4],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600,"tp_size":2}`))
	require.NoError(t, err)
	assert.True(t, p.FlatBlockIDs)
	_, err = ParseParams([]byte(`{"remote_block_ids":[[1]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600}`))
	assert.EqualError(t, err, "vllmpeer: kv_transfer_params has no tp_size")
	_, err = ParseParams([]byte(`{"remote_block_ids":"x","remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600,"tp_size":1}`))
	assert.EqualError(t, err, `vllmpeer: kv_transfer_params.remote_block_ids is "x", want a list of block-id lists (one per KV-cache group)`)
	js := Params{DoRemotePrefill: true, RemoteBlockIDs: [][]int{{1}}, RemoteEngineID: "e", RemoteRequestID: "r", RemoteHost: "h",
		RemotePort: 1, TPSize: 1, DCPSize: 1, PPSize: 1, RemoteNumTokens: 5, TransferMode: "pull"}.JSON()
	assert.Equal(t, `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":1,"dcp_size":1,"pp_size":1,"remote_num_tokens":5,"remote_blocks_expiry_time":null,"transfer_mode":"pull"}`, string(js))
}

func FuzzParseGetMeta(f *testing.F) {
	b, _ := getMetaRequest(0, 1)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _, _ = parseGetMeta(b) })
}

func FuzzPushRegKeys(f *testing.F) {
	b, _ := encode(&pushReg{RequestID: "r"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = mapKeys(b) })
}

func TestDecodeHandshake(t *testing.T) {
	inner, _ := encode(&agentMetadata{EngineID: "e", RegionMembers: [][]string{}})
	frame, _ := encode(&handshakePayload{CompatibilityHash: "h", AgentMetadataBytes: inner})
	md, err := decodeHandshake(frame, 0, "h", "e")
	require.NoError(t, err)
	assert.Equal(t, "e", md.EngineID)
	_, err = decodeHandshake(frame, 0, "g", "e")
	assert.EqualError(t, err, "NIXL compatibility hash mismatch. Local: g, Remote: h")
	_, err = decodeHandshake(frame, 0, "h", "f")
	assert.EqualError(t, err, `vllmpeer: remote engine id mismatch: expected "f", got "e"`)
	// The hash is checked before the inner bytes are decoded at all.
	bad, _ := encode(&handshakePayload{CompatibilityHash: "h", AgentMetadataBytes: []byte{0xc1}})
	_, err = decodeHandshake(bad, 2, "g", "e")
	assert.ErrorIs(t, err, ErrHashMismatch)
	_, err = decodeHandshake(bad, 2, "h", "e")
	assert.ErrorContains(t, err, "vllmpeer: failed to decode NixlAgentMetadata from tp 2: ")
	_, err = decodeHandshake([]byte{0x93}, 1, "h", "e")
	assert.ErrorContains(t, err, "vllmpeer: failed to decode NixlHandshakePayload from tp 1: ")
}

func FuzzDecodeHandshake(f *testing.F) {
	inner, _ := encode(&agentMetadata{EngineID: "e", RegionMembers: [][]string{}})
	frame, _ := encode(&handshakePayload{CompatibilityHash: "h", AgentMetadataBytes: inner})
	f.Add(frame)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = decodeHandshake(b, 0, "h", "e") })
}

func FuzzTimestamp(f *testing.F) {
	f.Add([]byte{0xcb, 0x40, 0xc8, 0x1c, 0xc0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = parseTimestamp(b) })
}

func FuzzParseParams(f *testing.F) {
	f.Add([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[3,4]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600,"tp_size":2}`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseParams(b) })
}

// Notifications from the network reach dispatch: whatever they hold, it
// records them and refuses what it cannot read, without a panic.
func FuzzDispatch(f *testing.F) {
	reg, _ := encode(&pushReg{RequestID: "r", LocalBlockIDs: [][]int{{1}}})
	for _, s := range []string{"req:1", "HB:a,b", "PUSH_REG:" + string(reg), "x:y:0", ":", "PUSH_REG:\x93"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &Peer{cfg: Config{TPSize: 1, Lease: DefaultLease, Now: timeNow}, held: map[string]*held{"req": {expected: []int{0}, count: []int{0}}},
			notifs: make([][]string, 1), pushWait: map[string]*pushWait{}, pushHeld: map[string]*pushHeld{},
			pendingRegs: make([][]pushReg, 1), changed: make(chan struct{})}
		p.dispatch(0, b)
		require.Len(t, p.notifs[0], 1)
	})
}

var timeNow = time.Now
