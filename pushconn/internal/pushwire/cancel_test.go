package pushwire

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCancelRoundTrip(t *testing.T) {
	for _, c := range []*Cancel{
		{RequestID: "r-1", EngineID: "decode", Rank: 3},
		{RequestID: "r-2", TransferID: "t-9", EngineID: "", Rank: 0},
	} {
		msg, err := EncodeCancel(c)
		require.NoError(t, err)
		require.True(t, IsCancel(msg))
		require.False(t, IsFailure(msg))
		require.False(t, IsRegistration(msg))
		got, err := DecodeCancel(msg)
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
}

func TestCancelExactBytes(t *testing.T) {
	msg, err := EncodeCancel(&Cancel{RequestID: "r", TransferID: "t", EngineID: "e", Rank: 1})
	require.NoError(t, err)
	want := "PUSH_CANCEL:\x84" + "\xaarequest_id\xa1r" + "\xabtransfer_id\xa1t" + "\xa9engine_id\xa1e" + "\xa4rank\x01"
	require.Equal(t, want, string(msg))
	msg, err = EncodeCancel(&Cancel{RequestID: "r", EngineID: "e", Rank: 200})
	require.NoError(t, err)
	require.Equal(t, "PUSH_CANCEL:\x83\xaarequest_id\xa1r\xa9engine_id\xa1e\xa4rank\xcc\xc8", string(msg))
}

func TestCancelEncodeRefusesInvalid(t *testing.T) {
	_, err := EncodeCancel(&Cancel{})
	require.ErrorContains(t, err, "PUSH_CANCEL field request_id is empty")
	_, err = EncodeCancel(&Cancel{RequestID: "r", Rank: -1})
	require.ErrorContains(t, err, "PUSH_CANCEL field rank -1 is out of range")
}

func TestCancelDecodeErrors(t *testing.T) {
	good, err := EncodeCancel(&Cancel{RequestID: "r", EngineID: "e", Rank: 1})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		msg  string
		want string
	}{
		"no prefix": {"PUSH_FAIL:\x80", `does not start with "PUSH_CANCEL:"`},
		"not a map": {"PUSH_CANCEL:\x90", "want a map, got an array"},
		"missing":   {"PUSH_CANCEL:\x81\xaarequest_id\xa1r", "engine_id is missing"},
		"no rank":   {"PUSH_CANCEL:\x82\xaarequest_id\xa1r\xa9engine_id\xa1e", "rank is missing"},
		"empty id":  {"PUSH_CANCEL:\x83\xaarequest_id\xa0\xa9engine_id\xa1e\xa4rank\x00", "request_id is empty"},
		"rank type": {"PUSH_CANCEL:\x81\xa4rank\xa1x", "field rank: malformed notification"},
		"negative":  {"PUSH_CANCEL:\x81\xa4rank\xff", "rank -1 is negative"},
		"twice":     {"PUSH_CANCEL:\x82\xa9engine_id\xa1x\xa9engine_id\xa1y", "engine_id appears twice"},
		"trailing":  {string(good) + "\x00", "1 bytes after the map"},
		"truncated": {string(good[:len(good)-1]), "message ends early"},
	} {
		got, err := DecodeCancel([]byte(c.msg))
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
		require.Nil(t, got, name)
	}
}

func TestCancelUnknownFieldsSkipped(t *testing.T) {
	msg := "PUSH_CANCEL:\x84\xa5extra\x92\xc3\xa1z" +
		"\xaarequest_id\xa1r\xa9engine_id\xa1e\xa4rank\x02"
	got, err := DecodeCancel([]byte(msg))
	require.NoError(t, err)
	require.Equal(t, &Cancel{RequestID: "r", EngineID: "e", Rank: 2}, got)
}

func FuzzDecodeCancel(f *testing.F) {
	for _, c := range []*Cancel{
		{RequestID: "r", EngineID: "e", Rank: 1},
		{RequestID: "cmpl-1-abcdef12", TransferID: "t", EngineID: "decode", Rank: 7},
	} {
		msg, err := EncodeCancel(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	f.Add([]byte("PUSH_CANCEL:"))
	f.Add([]byte("PUSH_CANCEL:\xdf\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := DecodeCancel(msg)
		if err != nil {
			if c != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v must wrap ErrMalformed and return no cancel", err)
			}
			return
		}
		again, err := EncodeCancel(c)
		if err != nil {
			t.Fatalf("decoded cancel does not re-encode: %v", err)
		}
		back, err := DecodeCancel(again)
		if err != nil {
			t.Fatalf("re-encoded cancel does not decode: %v", err)
		}
		if *back != *c {
			t.Fatalf("round trip changed %+v into %+v", c, back)
		}
	})
}
