package notif

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode"

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

func TestSeqCompletionWireFormat(t *testing.T) {
	b, err := EncodeSeqCompletion("req:7#1", 4, 18446744073709551615)
	require.NoError(t, err)
	assert.Equal(t, "req:7#1:4#18446744073709551615", string(b))
	c, err := DecodeSeqCompletion(b)
	require.NoError(t, err)
	assert.Equal(t, Completion{ID: "req:7#1", N: 4, Seq: 18446744073709551615}, c)
	// Without a seq the plain form, byte for byte what vLLM sends.
	b, err = EncodeSeqCompletion("req-1", 2, 0)
	require.NoError(t, err)
	assert.Equal(t, "req-1:2", string(b))
	c, err = DecodeSeqCompletion(b)
	require.NoError(t, err)
	assert.Equal(t, Completion{ID: "req-1", N: 2}, c)
	// Pull's decoder keeps refusing a tail.
	_, err = DecodeCompletion([]byte("req-1:2#5"))
	assert.ErrorIs(t, err, ErrMalformed)
	assert.ErrorContains(t, err, `count "2#5" is not a decimal number`)
	_, err = EncodeSeqCompletion("", 1, 3)
	assert.ErrorContains(t, err, "empty request id")
}

func TestDecodeSeqCompletionRejects(t *testing.T) {
	for msg, want := range map[string]string{
		"req:1#":                      "empty registration seq",
		"req:1#0":                     "seq is 0 or has a leading zero",
		"req:1#07":                    "seq is 0 or has a leading zero",
		"req:1#18446744073709551616":  "above 2^64-1",
		"req:1#184467440737095516150": "longer than 20 digits",
		"req:1#5#6":                   `seq "5#6" is not a decimal`,
		"req:1#+5":                    `seq "+5" is not a decimal`,
		"req:1# 5":                    `seq " 5" is not a decimal`,
		"req:#5":                      "empty count",
		"req:0#5":                     "count 0 outside",
		"req#5":                       "no ':'",
		":1#5":                        "empty request id",
	} {
		_, err := DecodeSeqCompletion([]byte(msg))
		require.Error(t, err, msg)
		assert.True(t, errors.Is(err, ErrMalformed), msg)
		assert.Contains(t, err.Error(), want, msg)
	}
}

// pythonInt reports whether Python's int() accepts s: surrounding
// whitespace, an optional sign, then decimal digits (any script's) with
// single '_' between them. It stands for vLLM's decoder of completions,
// which splits at the last ':' and reads the count with int().
func pythonInt(s string) bool {
	s = strings.TrimFunc(s, unicode.IsSpace)
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	prev := '_'
	for _, r := range s {
		switch {
		case unicode.IsDigit(r):
		case r == '_' && prev != '_':
		default:
			return false
		}
		prev = r
	}
	return prev != '_'
}

func TestPythonIntModel(t *testing.T) {
	for s, want := range map[string]bool{"1": true, " 12 ": true, "+3": true, "-3": true, "1_000": true, "\u0663": true,
		"": false, "1__0": false, "_1": false, "1_": false, "1#5": false, "+-1": false, "1 2": false, "0x1": false} {
		s, _ = strconv.Unquote(`"` + s + `"`)
		assert.Equal(t, want, pythonInt(s), "%q", s)
	}
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range []string{"req-1:2", "a:b:3", ":1", "x:", "x:0", "x:65536", "HB:a,b", "\xff:1",
		"req-1:2#7", "a:b#c:3#18446744073709551615", "x:1#", "x:1#0", "x:1#18446744073709551616", "x:1#2#3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		plain, perr := DecodeCompletion(msg)
		c, err := DecodeSeqCompletion(msg)
		if perr != nil && !errors.Is(perr, ErrMalformed) {
			t.Fatalf("error %v does not match ErrMalformed", perr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			if perr == nil {
				t.Fatalf("%q: plain decoder took %+v, seq decoder refused: %v", msg, plain, err)
			}
			return
		}
		switch {
		case perr == nil && plain != c:
			t.Fatalf("%q: the decoders disagree: %+v and %+v", msg, plain, c)
		case perr == nil && c.Seq != 0, perr != nil && c.Seq == 0:
			t.Fatalf("%q: plain decoder %v, seq %d", msg, perr, c.Seq)
		}
		// Whatever decodes must encode back to the same bytes.
		b, err := EncodeSeqCompletion(c.ID, c.N, c.Seq)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		if string(b) != string(msg) {
			t.Fatalf("round trip %q -> %+v -> %q", msg, c, b)
		}
		if c.Seq != 0 {
			// vLLM's reading: split at the last ':', int() the rest. It
			// must refuse the message, not count it for some request.
			i := strings.LastIndexByte(string(msg), ':')
			if pythonInt(string(msg[i+1:])) {
				t.Fatalf("%q reads as a plain completion of %q", msg, msg[:i])
			}
		}
	})
}
