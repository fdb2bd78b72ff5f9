package vllm

import (
	"bytes"
	"encoding/hex"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// sampleMetadata is a valid two-region metadata with every list set and
// values at the edges of their ranges.
func sampleMetadata() *AgentMetadata {
	return &AgentMetadata{
		EngineID:                 "decode-engine-1",
		AgentMetadata:            bytes.Repeat([]byte{0xab}, 70000), // bin32
		KVCachesBaseAddr:         []uint64{0, math.MaxUint64},
		DeviceID:                 MaxInt,
		NumBlocks:                1 << 20,
		BlockLens:                []uint64{0, 1 << 40},
		BlockStrides:             []uint64{0, math.MaxUint64},
		KVCacheLayout:            strings.Repeat("L", MaxStringLen),
		BlockSize:                1,
		SSMSizes:                 [2]uint64{math.MaxUint64, 1},
		AttnBackendName:          "TRITON_ATTN",
		PhysicalBlocksPerLogical: 2,
		RegionNumBlocks:          []int{0, MaxInt},
		RegionGroupIDs:           []int{SharedRegionGroupID, 3},
		RegionNames:              []string{"", "layers.10"},
		RegionMemTypes:           []string{MemTypeVRAM, MemTypeDRAM},
		DCPSize:                  4,
		PCPSize:                  2,
		RegionMembers:            [][]string{{}, {"layers.10", "layers.11", "日本"}},
	}
}

func TestAgentMetadataRoundTrip(t *testing.T) {
	m := sampleMetadata()
	require.NoError(t, m.Validate())
	enc := m.Encode(V12)
	require.Equal(t, []byte{0xde, 0x00, 0x13}, enc[:3], "map16 of 19 keys")
	got, err := DecodeAgentMetadata(enc, V12)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Equal(t, enc, got.Encode(V12), "encoding is canonical")
	require.Equal(t, append([]byte("x"), enc...), m.Append([]byte("x"), V12))

	// Any msgpack decoder reads the same map.
	var generic map[string]any
	require.NoError(t, msgpack.Unmarshal(enc, &generic))
	require.Len(t, generic, 19)
	require.Equal(t, "decode-engine-1", generic["engine_id"])
	require.Equal(t, int8(-1), generic["region_group_ids"].([]any)[0])

	// Empty optional lists are not None, and stay so.
	m.RegionNumBlocks, m.RegionGroupIDs, m.RegionNames, m.RegionMemTypes = []int{}, []int{}, []string{}, []string{}
	m.KVCachesBaseAddr, m.BlockLens, m.BlockStrides, m.RegionMembers = nil, nil, nil, nil
	got, err = DecodeAgentMetadata(m.Encode(V12), V12)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.NotNil(t, got.RegionNumBlocks)
}

func TestAgentMetadataDecodeCopiesItsInput(t *testing.T) {
	enc := sampleMetadata().Encode(V12)
	got, err := DecodeAgentMetadata(enc, V12)
	require.NoError(t, err)
	for i := range enc {
		enc[i] = 0
	}
	require.Equal(t, sampleMetadata(), got)
}

func TestAgentMetadataMissingKeys(t *testing.T) {
	for v := OldestVersion; v <= NewestVersion; v++ {
		full := sampleMetadataAt(v)
		for k, name := range metadataKeys {
			if !v.hasKey(k) {
				continue
			}
			b := dropKey(t, full.Encode(v), name)
			got, err := DecodeAgentMetadata(b, v)
			if k < kRegionNumBlocks {
				require.ErrorIs(t, err, ErrMalformed, name)
				require.ErrorContains(t, err, "field "+name+" is missing")
				continue
			}
			require.NoError(t, err, "version %d key %s", v, name)
			want := sampleMetadataAt(v)
			switch k {
			case kRegionNumBlocks:
				want.RegionNumBlocks = nil
			case kRegionGroupIDs:
				want.RegionGroupIDs = nil
			case kRegionNames:
				want.RegionNames = nil
			case kRegionMemTypes:
				want.RegionMemTypes = nil
			case kDCPSize:
				want.DCPSize = 1
			case kPCPSize:
				want.PCPSize = 1
			case kPLEBlockLen:
				want.PLEBlockLen = nil
			case kRegionMembers:
				want.RegionMembers = nil
			case kLayerGroupIDs:
				want.LayerGroupIDs = nil
			case kPackedMemberLayouts:
				want.PackedMemberLayouts = nil
			}
			require.Equal(t, want, got, "version %d key %s", v, name)
		}
	}
}

// dropKey re-encodes b, a metadata map, without key name, by decoding it
// with the generic decoder (its values come back in other forms, which the
// typed decoder accepts).
func dropKey(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	d := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := d.DecodeMapLen()
	require.NoError(t, err)
	var out bytes.Buffer
	e := msgpack.NewEncoder(&out)
	require.NoError(t, e.EncodeMapLen(n-1))
	for range n {
		k, err := d.DecodeString()
		require.NoError(t, err)
		v, err := d.DecodeRaw()
		require.NoError(t, err)
		if k != name {
			require.NoError(t, e.EncodeString(k))
			_, _ = out.Write(v)
		}
	}
	return out.Bytes()
}

func TestAgentMetadataValidate(t *testing.T) {
	for want, mutate := range map[string]func(m *AgentMetadata){
		"kv_caches_base_addr lists 32769 regions, limit 32768": func(m *AgentMetadata) {
			m.KVCachesBaseAddr = make([]uint64, MaxRegions+1)
		},
		"agent_metadata is 16777217 bytes, limit 16777216": func(m *AgentMetadata) {
			m.AgentMetadata = make([]byte, MaxAgentMetadata+1)
		},
		"block_lens has 1 entries, kv_caches_base_addr has 2":        func(m *AgentMetadata) { m.BlockLens = m.BlockLens[:1] },
		"block_strides has 3 entries, kv_caches_base_addr has 2":     func(m *AgentMetadata) { m.BlockStrides = append(m.BlockStrides, 1) },
		"region_num_blocks has 0 entries, kv_caches_base_addr has 2": func(m *AgentMetadata) { m.RegionNumBlocks = []int{} },
		"region_group_ids has 1 entries, kv_caches_base_addr has 2":  func(m *AgentMetadata) { m.RegionGroupIDs = []int{0} },
		"region_names has 1 entries, kv_caches_base_addr has 2":      func(m *AgentMetadata) { m.RegionNames = []string{"a"} },
		"region_mem_types has 1 entries, kv_caches_base_addr has 2":  func(m *AgentMetadata) { m.RegionMemTypes = []string{"VRAM"} },
		"region_members has 1 entries, kv_caches_base_addr has 2":    func(m *AgentMetadata) { m.RegionMembers = [][]string{{"a"}} },
		"block_strides entry 1 is 5, below block_lens entry 1099511627776": func(m *AgentMetadata) {
			m.BlockStrides[1] = 5
		},
		"device_id is -1, outside [0, 2147483647]":                      func(m *AgentMetadata) { m.DeviceID = -1 },
		"num_blocks is 2147483648, outside [0, 2147483647]":             func(m *AgentMetadata) { m.NumBlocks = MaxInt + 1 },
		"block_size is 0, outside [1, 2147483647]":                      func(m *AgentMetadata) { m.BlockSize = 0 },
		"physical_blocks_per_logical_kv_block is 0, outside [1, ":       func(m *AgentMetadata) { m.PhysicalBlocksPerLogical = 0 },
		"dcp_size is 0, outside [1, ":                                   func(m *AgentMetadata) { m.DCPSize = 0 },
		"pcp_size is -3, outside [1, ":                                  func(m *AgentMetadata) { m.PCPSize = -3 },
		"region_num_blocks entry 1 is -1, outside [0, 2147483647]":      func(m *AgentMetadata) { m.RegionNumBlocks[1] = -1 },
		"region_group_ids entry 0 is -2, outside [-1, 2147483647]":      func(m *AgentMetadata) { m.RegionGroupIDs[0] = -2 },
		"engine_id is 1025 bytes, limit 1024":                           func(m *AgentMetadata) { m.EngineID = strings.Repeat("e", 1025) },
		"kv_cache_layout is not valid UTF-8":                            func(m *AgentMetadata) { m.KVCacheLayout = "\xff" },
		"attn_backend_name is 2000 bytes, limit 1024":                   func(m *AgentMetadata) { m.AttnBackendName = strings.Repeat("a", 2000) },
		"region_names entry 1 is 1025 bytes, limit 1024":                func(m *AgentMetadata) { m.RegionNames[1] = strings.Repeat("n", 1025) },
		"region_mem_types entry 0 is not valid UTF-8":                   func(m *AgentMetadata) { m.RegionMemTypes[0] = "V\xc0" },
		"region_members entry 1 name 2 is 1025 bytes, limit 1024":       func(m *AgentMetadata) { m.RegionMembers[1][2] = strings.Repeat("m", 1025) },
		"region_members entry 0 lists 16385 layers, limit 16384":        func(m *AgentMetadata) { m.RegionMembers[0] = make([]string, MaxRegionMembers+1) },
		"agent metadata field region_members entry 1 name 0 is not val": func(m *AgentMetadata) { m.RegionMembers[1][0] = "\xff" },
	} {
		m := sampleMetadata()
		mutate(m)
		err := m.Validate()
		require.ErrorIs(t, err, ErrMalformed, want)
		require.ErrorContains(t, err, want)
		// Encode does not validate; the decoder refuses what Validate does.
		if len(m.KVCachesBaseAddr) <= MaxRegions && len(m.AgentMetadata) <= MaxAgentMetadata {
			_, err = DecodeAgentMetadata(m.Encode(V12), V12)
			require.ErrorIs(t, err, ErrMalformed, want)
		}
	}
	// An empty region_members and zero regions are valid.
	m := sampleMetadata()
	m.RegionMembers = [][]string{}
	require.NoError(t, m.Validate())
	m = &AgentMetadata{BlockSize: 16, PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1}
	require.NoError(t, m.Validate())
	got, err := DecodeAgentMetadata(m.Encode(V12), V12)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

func TestAgentMetadataDecodeStrictness(t *testing.T) {
	ex1 := facts23(t)
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"bad utf8 key": {[]byte("\x81\xa2\xff\xfe\x00"), "map key: vllm: malformed message: at byte 1: string is not valid UTF-8"},
		"bad utf8 value": {replaceValue(t, ex1, "engine_id", "\xa1\xff"),
			"field engine_id: vllm: malformed message: at byte 13: string is not valid UTF-8"},
		"long key": {append([]byte("\x81\xda\x04\x01"), bytes.Repeat([]byte("k"), 1025)...),
			"map key: vllm: malformed message: at byte 1: string of 1025 bytes, limit 1024"},
		"deep unknown": {append(append([]byte("\x81\xa1z"), bytes.Repeat([]byte{0x91}, 40)...), 0x00),
			`unknown key "z": vllm: malformed message: at byte 35: value nested deeper than 32 levels`},
		"unknown truncated": {[]byte("\x81\xa1z\xc6\x00\x00\x01\x00"), "at byte 8: value claims 256 bytes but only 0 follow"},
		"unused code":       {[]byte("\x81\xa1z\xc1"), "invalid msgpack code 0xc1"},
		"ext for int":       {replaceValue(t, ex1, "device_id", "\xd4\x01\x00"), "field device_id: vllm: malformed message: at byte 75: want an integer, got an extension (0xd4)"},
		"uint64 for int":    {replaceValue(t, ex1, "num_blocks", "\xcf\x80\x00\x00\x00\x00\x00\x00\x00"), "integer 9223372036854775808 is above 2147483647"},
		"int64 min":         {replaceValue(t, ex1, "num_blocks", "\xd3\x80\x00\x00\x00\x00\x00\x00\x00"), "integer -9223372036854775808 is below 0"},
		"nil list":          {replaceValue(t, ex1, "block_lens", "\xc0"), "field block_lens: vllm: malformed message: at byte 101: want an array, got nil (0xc0)"},
		"map for list":      {replaceValue(t, ex1, "region_names", "\x80"), "field region_names: vllm: malformed message: at byte 292: want an array, got a map (0x80)"},
		"int in names":      {replaceValue(t, ex1, "region_names", "\x91\x01"), "field region_names: entry 0: vllm: malformed message: at byte 293: want a string, got an integer (0x01)"},
		"nil member list":   {replaceValue(t, ex1, "region_members", "\x91\xc0"), "field region_members: entry 0: vllm: malformed message: at byte 347: want an array, got nil (0xc0)"},
		"huge bin":          {replaceValue(t, ex1, "agent_metadata", "\xc6\x01\x00\x00\x01"), "binary of 16777217 bytes, limit 16777216"},
		"bin claims more":   {replaceValue(t, ex1, "agent_metadata", "\xc6\x00\x10\x00\x00"), "message ends early: need 1048576 more bytes"},
		"huge map":          {[]byte("\xdf\xff\xff\xff\xff"), "at byte 0: map claims 4294967295 entries but only 0 bytes follow"},
		"array claims more": {replaceValue(t, ex1, "kv_caches_base_addr", "\xdc\x10\x00"), "at byte 55: array claims 4096 entries but only"},
		"too big": {make([]byte, MaxEncodedAgentMetadata+1),
			"agent metadata of 67108865 bytes, limit 67108864"},
	} {
		got, err := DecodeAgentMetadata(c.b, V12)
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
		require.Nil(t, got, name)
	}
	// Nesting up to the limit in an unknown key is skipped.
	b := append(append([]byte("\xde\x00\x14\xa1z"), bytes.Repeat([]byte{0x91}, 31)...), 0x00)
	b = append(b, ex1[3:]...)
	got, err := DecodeAgentMetadata(b, V12)
	require.NoError(t, err)
	require.Equal(t, "e1", got.EngineID)
}

// facts23 is the encoding of the facts' worked example (section 2.3).
func facts23(t *testing.T) []byte {
	return mustUnhex(t, loadWireVectors(t).AgentMetadata[0].Hex)
}

// replaceValue returns b, a metadata map, with key's value replaced by the
// raw msgpack v.
func replaceValue(t *testing.T, b []byte, key, v string) []byte {
	t.Helper()
	d := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := d.DecodeMapLen()
	require.NoError(t, err)
	out := appendMapLen(nil, n)
	found := false
	for range n {
		k, err := d.DecodeString()
		require.NoError(t, err)
		raw, err := d.DecodeRaw()
		require.NoError(t, err)
		out = appendStr(out, k)
		if k == key {
			raw, found = []byte(v), true
		}
		out = append(out, raw...)
	}
	require.True(t, found, key)
	return out
}

// allocated returns the bytes allocated while f runs: the least of a few
// runs, as the count is process-wide and the runtime allocates now and then.
func allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// A header's claim costs nothing: whatever it says, decoding a short input
// allocates what its error takes, a few KiB at most (2.3 KiB for "inner
// members" since the shared reader's errors; the race detector and other
// goroutines add some), where honouring any of these claims would take
// 128 KiB or more.
func TestDecodersIgnoreLengthClaims(t *testing.T) {
	ex1 := facts23(t)
	for name, b := range map[string][]byte{
		"map32":            []byte("\xdf\xff\xff\xff\xff"),
		"array32 of addrs": replaceValue(t, ex1, "kv_caches_base_addr", "\xdd\x00\x00\x80\x00"),
		"array16 of names": replaceValue(t, ex1, "region_names", "\xdc\x80\x00\xa0"),
		"members":          replaceValue(t, ex1, "region_members", "\xdd\x00\x00\x80\x00\x90"),
		"inner members":    replaceValue(t, ex1, "region_members", "\x91\xdc\x40\x00\xa0"),
		"bin32":            replaceValue(t, ex1, "agent_metadata", "\xc6\x00\xff\xff\xff"),
		"str32":            replaceValue(t, ex1, "engine_id", "\xdb\x00\x00\x03\xff"),
	} {
		n := allocated(func() {
			_, err := DecodeAgentMetadata(b, V12)
			require.Error(t, err, name)
		})
		require.Less(t, n, uint64(4096+len(b)), "%s: %d bytes allocated", name, n)
	}
	for name, b := range map[string][]byte{
		"payload map32": []byte("\xdf\xff\xff\xff\xff"),
		"payload bin32": []byte("\x81\xb4agent_metadata_bytes\xc6\x03\xff\xff\xff"),
	} {
		n := allocated(func() {
			_, err := DecodeHandshakePayload(b)
			require.Error(t, err, name)
		})
		require.Less(t, n, uint64(4096), "%s: %d bytes allocated", name, n)
	}
	n := allocated(func() {
		_, _, err := DecodeMetaRequest([]byte("\xdd\xff\xff\xff\xff"))
		require.Error(t, err)
	})
	require.Less(t, n, uint64(4096))
}

// What a decoder allocates is bounded by its input: the worst valid inputs
// (every list at its limit, of the smallest elements) cost a bounded
// multiple of their size.
func TestDecodeAllocationIsBoundedByInput(t *testing.T) {
	m := &AgentMetadata{
		KVCachesBaseAddr: make([]uint64, MaxRegions), BlockLens: make([]uint64, MaxRegions),
		BlockStrides: make([]uint64, MaxRegions), BlockSize: 1, PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1,
		RegionNumBlocks: make([]int, MaxRegions), RegionGroupIDs: make([]int, MaxRegions),
		RegionNames: make([]string, MaxRegions), RegionMemTypes: make([]string, MaxRegions),
		RegionMembers: make([][]string, MaxRegions),
	}
	for i := range m.RegionMembers {
		m.RegionMembers[i] = []string{} // decoded so
	}
	m.RegionMembers[0] = make([]string, MaxRegionMembers)
	enc := m.Encode(V12)
	var got *AgentMetadata
	n := allocated(func() {
		var err error
		got, err = DecodeAgentMetadata(enc, V12)
		require.NoError(t, err)
	})
	require.Equal(t, m, got)
	require.Less(t, n, uint64(32*len(enc)), "%d bytes allocated for %d bytes of input", n, len(enc))
	allocs := testing.AllocsPerRun(3, func() { _, _ = DecodeAgentMetadata(enc, V12) })
	require.Less(t, allocs, float64(MaxRegions+16), "one list per region_members entry, a few more")
	t.Logf("worst case: %d bytes of input, %d allocated, %.0f allocations", len(enc), n, allocs)
}

func TestAppendIntForms(t *testing.T) {
	for v, want := range map[int64]string{
		0: "00", 127: "7f", 128: "cc80", 255: "ccff", 256: "cd0100", 65535: "cdffff", 65536: "ce00010000",
		math.MaxUint32: "ceffffffff", math.MaxUint32 + 1: "cf0000000100000000", math.MaxInt64: "cf7fffffffffffffff",
		-1: "ff", -32: "e0", -33: "d0df", -128: "d080", -129: "d1ff7f", -32768: "d18000", -32769: "d2ffff7fff",
		math.MinInt32: "d280000000", math.MinInt32 - 1: "d3ffffffff7fffffff", math.MinInt64: "d38000000000000000",
	} {
		require.Equal(t, want, hex.EncodeToString(appendInt(nil, v)), "%d", v)
		rd := newReader(appendInt(nil, v))
		got, err := rd.Int64()
		require.NoError(t, err)
		require.Equal(t, v, got, "%d", v)
	}
	require.Equal(t, "cfffffffffffffffff", hex.EncodeToString(appendUint(nil, math.MaxUint64)))
}

func TestAppendLengthForms(t *testing.T) {
	for _, c := range []struct {
		n         int
		str, bin  string // header of a str, a bin of n bytes
		arr, mapp string
	}{
		{0, "a0", "c400", "90", "80"},
		{15, "af", "c40f", "9f", "8f"},
		{16, "b0", "c410", "dc0010", "de0010"},
		{31, "bf", "c41f", "dc001f", "de001f"},
		{32, "d920", "c420", "dc0020", "de0020"},
		{255, "d9ff", "c4ff", "dc00ff", "de00ff"},
		{256, "da0100", "c50100", "dc0100", "de0100"},
		{65535, "daffff", "c5ffff", "dcffff", "deffff"},
		{65536, "db00010000", "c600010000", "dd00010000", "df00010000"},
	} {
		p := bytes.Repeat([]byte{'x'}, c.n)
		require.Equal(t, c.str, hex.EncodeToString(appendStr(nil, string(p))[:len(c.str)/2]), "str %d", c.n)
		require.Equal(t, c.bin, hex.EncodeToString(appendBin(nil, p)[:len(c.bin)/2]), "bin %d", c.n)
		require.Equal(t, c.arr, hex.EncodeToString(appendArrayLen(nil, c.n)), "array %d", c.n)
		require.Equal(t, c.mapp, hex.EncodeToString(appendMapLen(nil, c.n)), "map %d", c.n)
		rd := newReader(appendStr(nil, string(p)))
		got, err := rd.RawStr(-1)
		require.NoError(t, err)
		require.Equal(t, p, got)
		rd = newReader(appendBin(nil, p))
		got, err = rd.RawBin(-1)
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
}
