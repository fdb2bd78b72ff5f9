package vllm

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestHandshakePayloadMetadataChecksTheHashFirst(t *testing.T) {
	v := loadWireVectors(t)
	hash := v.Hashes[0].SHA256
	p := &HandshakePayload{CompatibilityHash: hash, AgentMetadataBytes: []byte("not msgpack at all")}

	// A differing hash is refused before the bytes are looked at.
	other := v.Hashes[1].SHA256
	_, err := p.Metadata(other, V12)
	require.ErrorIs(t, err, ErrIncompatible)
	require.NotErrorIs(t, err, ErrMalformed)
	require.ErrorContains(t, err, `compatibility hash mismatch: local "`+other+`", remote "`+hash+`"`)

	// The same hash leads to decoding, which fails on these bytes.
	_, err = p.Metadata(hash, V12)
	require.ErrorIs(t, err, ErrMalformed)

	m := sampleMetadata()
	p.AgentMetadataBytes = m.Encode(V12)
	got, err := DecodeHandshakePayload(p.Encode())
	require.NoError(t, err)
	md, err := got.Metadata(hash, V12)
	require.NoError(t, err)
	require.Equal(t, m, md)
}

func TestHandshakePayloadForms(t *testing.T) {
	for _, n := range []int{0, 255, 256, 65535, 65536} {
		p := &HandshakePayload{CompatibilityHash: strings.Repeat("a", 64), AgentMetadataBytes: bytes.Repeat([]byte{1}, n)}
		enc := p.Encode()
		require.Equal(t, "82b2"+hex.EncodeToString([]byte("compatibility_hash"))+"d940", hex.EncodeToString(enc[:22]))
		// Any msgpack decoder reads the same two fields.
		var generic struct {
			Hash string `msgpack:"compatibility_hash"`
			MD   []byte `msgpack:"agent_metadata_bytes"`
		}
		require.NoError(t, msgpack.Unmarshal(enc, &generic))
		require.Equal(t, p.CompatibilityHash, generic.Hash)
		require.Len(t, generic.MD, n)
		got, err := DecodeHandshakePayload(enc)
		require.NoError(t, err)
		if n == 0 {
			require.Nil(t, got.AgentMetadataBytes)
			got.AgentMetadataBytes = p.AgentMetadataBytes
		}
		require.Equal(t, p, got)
		for i := range enc {
			enc[i] = 0
		}
		require.Equal(t, p, got, "the payload keeps copies")
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"repeated": {append([]byte("\x83\xb2compatibility_hash\xa0\xb2compatibility_hash\xa0"), "\xb4agent_metadata_bytes\xc4\x00"...),
			"handshake payload field compatibility_hash appears twice"},
		"long hash": {append([]byte("\x81\xb2compatibility_hash\xda\x04\x01"), bytes.Repeat([]byte("a"), 1025)...),
			"string of 1025 bytes, limit 1024"},
		"huge metadata": {[]byte("\x81\xb4agent_metadata_bytes\xc6\x04\x00\x00\x01"), "binary of 67108865 bytes, limit 67108864"},
		"trailing":      {append((&HandshakePayload{}).Encode(), 0xc0), "handshake payload: 1 bytes after the value"},
		"array":         {[]byte("\x92\xa0\xc4\x00"), "want a map, got an array (0x92)"},
		"empty":         {nil, "message ends early"},
	} {
		_, err := DecodeHandshakePayload(c.b)
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
	}
}

func TestMetaRequestRoundTrip(t *testing.T) {
	for _, r := range [][2]int{{0, 0}, {0, 3}, {7, 127}, {128, 255}, {65535, 65536}, {MaxInt, MaxInt}} {
		b := EncodeMetaRequest(r[0], r[1])
		var generic []any
		require.NoError(t, msgpack.Unmarshal(b, &generic))
		require.Equal(t, []byte(GetMetaMsg), generic[0], "element 0 is bin")
		pp, tp, err := DecodeMetaRequest(b)
		require.NoError(t, err)
		require.Equal(t, r, [2]int{pp, tp})
	}
	_, _, err := DecodeMetaRequest(EncodeMetaRequest(MaxInt+1, 0))
	require.ErrorContains(t, err, "pp rank: vllm: malformed message: at byte 15: integer 2147483648 is above 2147483647")
	_, _, err = DecodeMetaRequest([]byte("\x93\xc3\x00\x00"))
	require.ErrorContains(t, err, "element 0: vllm: malformed message: at byte 1: want a string, got a bool (0xc3)")
	_, _, err = DecodeMetaRequest(append([]byte("\x93\xda\x04\x01"), make([]byte, 1027)...))
	require.ErrorContains(t, err, "string of 1025 bytes, limit 1024")
}

func TestTimestampRoundTrip(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 12345.5, 1e-300, math.SmallestNonzeroFloat64, math.MaxFloat64, 1 << 60} {
		b := EncodeTimestamp(f)
		require.Len(t, b, 9)
		require.Equal(t, byte(0xcb), b[0])
		var generic float64
		require.NoError(t, msgpack.Unmarshal(b, &generic))
		require.Equal(t, f, generic)
		got, err := DecodeTimestamp(b)
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(f), math.Float64bits(got))
	}
	got, err := DecodeTimestamp(EncodeTimestamp(math.Copysign(0, -1)))
	require.NoError(t, err)
	require.True(t, math.Signbit(got), "-0 stays -0")
	got, err = DecodeTimestamp([]byte("\xcf\xff\xff\xff\xff\xff\xff\xff\xff"))
	require.NoError(t, err)
	require.Equal(t, float64(math.MaxUint64), got)
	got, err = DecodeTimestamp([]byte("\xd3\x80\x00\x00\x00\x00\x00\x00\x00"))
	require.NoError(t, err)
	require.Equal(t, float64(math.MinInt64), got)
	_, err = DecodeTimestamp([]byte("\xcb\xff\xf0\x00\x00\x00\x00\x00\x00"))
	require.ErrorContains(t, err, "-Inf is not a clock reading")
	_, err = DecodeTimestamp([]byte("\xca\x7f\xc0\x00\x00"))
	require.ErrorContains(t, err, "NaN is not a clock reading")
}
