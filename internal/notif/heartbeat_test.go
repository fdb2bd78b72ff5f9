package notif

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeartbeatRoundTrip(t *testing.T) {
	b, err := EncodeHeartbeat([]string{"a", "b:1", "c-2"})
	require.NoError(t, err)
	assert.Equal(t, "HB:a,b:1,c-2", string(b))
	assert.True(t, IsHeartbeat(b))
	ids, err := DecodeHeartbeat(b)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b:1", "c-2"}, ids)
}

func TestEncodeHeartbeatRejects(t *testing.T) {
	_, err := EncodeHeartbeat(nil)
	assert.ErrorContains(t, err, "at least one request id")
	_, err = EncodeHeartbeat([]string{"a,b"})
	assert.ErrorContains(t, err, `"a,b" contains ','`)
	_, err = EncodeHeartbeat([]string{"a", ""})
	assert.ErrorContains(t, err, "empty request id")
}

func TestDecodeHeartbeatRejects(t *testing.T) {
	for msg, want := range map[string]string{
		"HB:":                                   "no request id",
		"HB:a,,b":                               "empty request id at position 1",
		"HB:a,":                                 "empty request id at position 1",
		"HB:,a":                                 "empty request id at position 0",
		"hb:a":                                  "does not start with",
		"req-1:1":                               "does not start with",
		"HB:" + strings.Repeat("a", MaxIDLen+1): "limit 1024",
		"HB:" + strings.Repeat("a,", MaxHeartbeatIDs) + "a": "ids, limit",
	} {
		_, err := DecodeHeartbeat([]byte(msg))
		require.Error(t, err, msg)
		assert.True(t, errors.Is(err, ErrMalformed))
		assert.Contains(t, err.Error(), want, msg)
	}
}

func TestSplitHeartbeats(t *testing.T) {
	ids := []string{"aaaa", "bbbb", "bad,id", "cccc", "dddd"}
	msgs, bad := SplitHeartbeats(ids, len("HB:aaaa,bbbb"))
	require.Len(t, bad, 1)
	assert.ErrorContains(t, bad[0], "bad,id")
	var got []string
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), len("HB:aaaa,bbbb"))
		d, err := DecodeHeartbeat(m)
		require.NoError(t, err)
		got = append(got, d...)
	}
	assert.Equal(t, []string{"aaaa", "bbbb", "cccc", "dddd"}, got)
	assert.Len(t, msgs, 2)
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for _, s := range []string{"HB:a", "HB:a,b,c", "HB:", "HB:,", "HB:a,,b", "x:1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ids, err := DecodeHeartbeat(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		b, err := EncodeHeartbeat(ids)
		if err != nil {
			t.Fatalf("decoded %q does not encode: %v", ids, err)
		}
		if string(b) != string(msg) {
			t.Fatalf("round trip %q -> %q", msg, b)
		}
	})
}
