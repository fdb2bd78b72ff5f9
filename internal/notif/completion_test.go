package notif

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCompletionRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		id string
		n  int
	}{
		{"req-1", 1},
		{"cmpl-7f3a9c21-0-1a2b3c4d", 8},
		{"a:b:c", 2}, // ids may contain ':'
		{"x", MaxCount},
	} {
		b, err := EncodeCompletion(tc.id, tc.n)
		require.NoError(t, err)
		c, err := DecodeCompletion(b)
		require.NoError(t, err)
		assert.Equal(t, Completion{ID: tc.id, N: tc.n}, c)
	}
}

func TestCompletionWireFormat(t *testing.T) {
	b, err := EncodeCompletion("req:7", 4)
	require.NoError(t, err)
	assert.Equal(t, "req:7:4", string(b))
	c, err := DecodeCompletion([]byte("req:7:4"))
	require.NoError(t, err)
	assert.Equal(t, "req:7", c.ID)
	assert.Equal(t, 4, c.N)
}

func TestDecodeCompletionRejects(t *testing.T) {
	for msg, want := range map[string]string{
		"":                                     "no ':'",
		"req":                                  "no ':'",
		":2":                                   "empty request id",
		"req:":                                 "empty count",
		"req:0":                                "count 0 outside",
		"req:01":                               "leading zero",
		"req:-1":                               "not a decimal",
		"req:+1":                               "not a decimal",
		"req:1x":                               "not a decimal",
		"req:65537":                            "count 65537 outside",
		"req:9999999":                          "longer than",
		"req: 1":                               "not a decimal",
		strings.Repeat("a", MaxIDLen+1) + ":1": "limit 1024",
	} {
		_, err := DecodeCompletion([]byte(msg))
		require.Error(t, err, msg)
		assert.True(t, errors.Is(err, ErrMalformed), msg)
		assert.Contains(t, err.Error(), want, msg)
	}
}

func TestEncodeCompletionRejects(t *testing.T) {
	_, err := EncodeCompletion("", 1)
	assert.ErrorContains(t, err, "empty request id")
	_, err = EncodeCompletion("r", 0)
	assert.ErrorContains(t, err, "count 0 outside")
	_, err = EncodeCompletion(strings.Repeat("r", MaxIDLen+1), 1)
	assert.ErrorContains(t, err, "limit 1024")
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range []string{"req-1:2", "a:b:3", ":1", "x:", "x:0", "x:65536", "HB:a,b", "\xff:1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := DecodeCompletion(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must encode back to the same bytes.
		b, err := EncodeCompletion(c.ID, c.N)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		if string(b) != string(msg) {
			t.Fatalf("round trip %q -> %+v -> %q", msg, c, b)
		}
	})
}
