package vllm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// sampleMetadataAt is sampleMetadata with the fields of version v set, and
// those v does not have left zero (a decoder at v gives them zero).
func sampleMetadataAt(v Version) *AgentMetadata {
	m := sampleMetadata()
	ple := uint64(1) << 33
	if v.hasKey(kPLEBlockLen) {
		m.PLEBlockLen = &ple
	}
	if v.hasKey(kLayerGroupIDs) {
		m.LayerGroupIDs = []LayerGroup{{"layers.11", 0}, {"layers.10", MaxInt}, {"日本", 7}}
	}
	if v.hasKey(kPackedMemberLayouts) {
		m.PackedMemberLayouts = []PackedMember{{"layers.11", 1 << 40, 0}, {"layers.10", 0, 1 << 20}}
	}
	return m
}

// The keys of each version, in msgspec's declaration order
// (nixl/metadata.py @ vllm 0.31.0, 0.32.0, 0.33.0, 0.34.0).
func TestAgentMetadataKeysByVersion(t *testing.T) {
	want := map[Version][]string{
		V12: {"engine_id", "agent_metadata", "kv_caches_base_addr", "device_id", "num_blocks", "block_lens",
			"block_strides", "kv_cache_layout", "block_size", "ssm_sizes", "attn_backend_name",
			"physical_blocks_per_logical_kv_block", "region_num_blocks", "region_group_ids", "region_names",
			"region_mem_types", "dcp_size", "pcp_size", "region_members"},
	}
	want[V13] = append(append([]string(nil), want[V12]...), "packed_member_layouts")
	want[V14] = append(append(append([]string(nil), want[V12][:18]...), "ple_block_len", "region_members"), "packed_member_layouts")
	want[V15] = want[V14]
	want[V16] = append(append(append([]string(nil), want[V12][:18]...), "ple_block_len", "region_members", "layer_group_ids"), "packed_member_layouts")
	require.Len(t, want[V16], 22)
	for v := OldestVersion; v <= NewestVersion; v++ {
		enc := sampleMetadataAt(NewestVersion).Encode(v)
		d := msgpack.NewDecoder(bytes.NewReader(enc))
		n, err := d.DecodeMapLen()
		require.NoError(t, err)
		var keys []string
		for range n {
			k, err := d.DecodeString()
			require.NoError(t, err)
			keys = append(keys, k)
			require.NoError(t, d.Skip())
		}
		require.Equal(t, want[v], keys, "version %d", v)

		// Decoded at v, the fields v lacks stay zero.
		got, err := DecodeAgentMetadata(enc, v)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, sampleMetadataAt(v), got, "version %d", v)
		require.Equal(t, enc, got.Encode(v), "version %d: canonical", v)
	}
}

// A key a version does not have is skipped whatever it holds, as msgspec
// skips an unknown key: a version-16 encoding read at 12 drops the three
// later keys, even malformed ones.
func TestAgentMetadataLaterKeysAreUnknown(t *testing.T) {
	m := sampleMetadataAt(V16)
	m.LayerGroupIDs = []LayerGroup{{"x", 1}, {"x", 2}} // refused at 16
	enc := m.Encode(V16)
	_, err := DecodeAgentMetadata(enc, V16)
	require.ErrorIs(t, err, ErrMalformed)
	require.EqualError(t, err, `vllm: malformed message: agent metadata field layer_group_ids names layer "x" twice`)
	got, err := DecodeAgentMetadata(enc, V12)
	require.NoError(t, err)
	require.Equal(t, sampleMetadataAt(V12), got)
}

func TestVersionChecks(t *testing.T) {
	for _, v := range []Version{0, 11, 17} {
		_, err := DecodeAgentMetadata(sampleMetadata().Encode(V12), v)
		require.ErrorIs(t, err, ErrUnsupported)
		require.ErrorContains(t, err, "gonixl speaks 12 to 16")
	}
	for release, want := range map[string]Version{"0.31.0": V13, "0.32.0": V14, "0.33.0": V15, "0.34.0": V16, "0.34.0+cu129": V16} {
		got, ok := VersionOfRelease(release)
		require.True(t, ok, release)
		require.Equal(t, want, got, release)
	}
	for _, release := range []string{"0.30.0", "0.34.1", "0.35.0.dev12+g0123abc", "0.34.0rc1", "", "dev"} {
		_, ok := VersionOfRelease(release)
		require.False(t, ok, release)
	}
}
