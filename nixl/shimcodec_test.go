package nixl

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shimBuf builds buffers the way the C++ shim does, to test the decoders
// against the documented encoding.
type shimBuf []byte

func (b shimBuf) u64(v uint64) shimBuf { return binary.LittleEndian.AppendUint64(b, v) }
func (b shimBuf) str(s string) shimBuf { return append(b.u64(uint64(len(s))), s...) }

func TestDecodeStrings(t *testing.T) {
	b := shimBuf{}.u64(3).str("UCX").str("").str("POSIX")
	got, err := decodeStrings(b)
	require.NoError(t, err)
	assert.Equal(t, []string{"UCX", "", "POSIX"}, got)

	got, err = decodeStrings(shimBuf{}.u64(0))
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestDecodeMemsParams(t *testing.T) {
	b := shimBuf{}.u64(2).u64(uint64(DRAM)).u64(uint64(VRAM)).
		u64(2).str("num_workers").str("1").str("ucx_error_handling_mode").str("none")
	mems, params, err := decodeMemsParams(b)
	require.NoError(t, err)
	assert.Equal(t, []MemType{DRAM, VRAM}, mems)
	assert.Equal(t, map[string]string{"num_workers": "1", "ucx_error_handling_mode": "none"}, params)
}

func TestDecodeQuery(t *testing.T) {
	b := shimBuf{}.u64(3).u64(0).u64(1).u64(1).str("size").str("42").u64(1).u64(0)
	got, err := decodeQuery(b)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Nil(t, got[0])
	assert.Equal(t, map[string]string{"size": "42"}, got[1])
	assert.NotNil(t, got[2], "an answer with no keys is not the same as no answer")
	assert.Empty(t, got[2])

	_, err = decodeQuery(shimBuf{}.u64(1).u64(7))
	assert.ErrorIs(t, err, errShimEncoding)
}

func TestDecodersRejectMalformedBuffers(t *testing.T) {
	for name, b := range map[string]shimBuf{
		"short count":        {1, 2, 3},
		"count past end":     shimBuf{}.u64(1 << 40),
		"string past end":    shimBuf{}.u64(1).u64(100).str("x"),
		"trailing bytes":     append(shimBuf{}.u64(1).str("UCX"), 0),
		"missing second str": shimBuf{}.u64(2).str("UCX"),
	} {
		_, err := decodeStrings(b)
		assert.ErrorIs(t, err, errShimEncoding, name)
	}
	_, _, err := decodeMemsParams(shimBuf{}.u64(1).u64(0).u64(1).str("k"))
	assert.ErrorIs(t, err, errShimEncoding)
	_, err = decodeQuery(shimBuf{}.u64(2).u64(0))
	assert.ErrorIs(t, err, errShimEncoding)
}

func TestEncodeParamsIsSortedAndDecodable(t *testing.T) {
	p := map[string]string{"z": "1", "a": "", "m": "x=y"}
	b := encodeParams(p)
	want := shimBuf{}.u64(3).str("a").str("").str("m").str("x=y").str("z").str("1")
	assert.Equal(t, []byte(want), b)

	r := shimReader{b}
	got, err := r.params()
	require.NoError(t, err)
	require.NoError(t, r.end())
	assert.Equal(t, p, got)

	assert.Equal(t, []byte(shimBuf{}.u64(0)), encodeParams(nil))
}

// FuzzShimDecoders checks that no input makes the decoders panic, and
// that a decoded list never holds more content than its input.
func FuzzShimDecoders(f *testing.F) {
	f.Add([]byte(shimBuf{}.u64(2).str("UCX").str("")))
	f.Add([]byte(shimBuf{}.u64(1).u64(0).u64(1).str("k").str("v")))
	f.Add([]byte(shimBuf{}.u64(1 << 62)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = decodeMemsParams(b)
		_, _ = decodeQuery(b)
		l, err := decodeStrings(b)
		if err != nil {
			return
		}
		total := 0
		for _, s := range l {
			total += len(s)
		}
		if total > len(b) {
			t.Fatalf("decoded %d bytes of content from a %d-byte buffer", total, len(b))
		}
	})
}
