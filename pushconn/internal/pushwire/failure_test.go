package pushwire

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestFailureRoundTrip(t *testing.T) {
	for _, f := range []*Failure{
		{RequestID: "r-1", EngineID: "pre", Rank: 3, Kind: FailPost, Reason: "post: backend error"},
		{RequestID: "r-2", TransferID: "t-9", EngineID: "", Rank: 0, Kind: FailExpired, Reason: ""},
	} {
		msg, err := EncodeFailure(f)
		require.NoError(t, err)
		require.True(t, IsFailure(msg))
		require.False(t, IsRegistration(msg))
		got, err := DecodeFailure(msg)
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
}

func TestFailureExactBytes(t *testing.T) {
	msg, err := EncodeFailure(&Failure{RequestID: "r", TransferID: "t", EngineID: "e", Rank: 1, Kind: FailTransfer, Reason: "x"})
	require.NoError(t, err)
	want := "PUSH_FAIL:\x86" + "\xaarequest_id\xa1r" + "\xabtransfer_id\xa1t" + "\xa9engine_id\xa1e" +
		"\xa4rank\x01" + "\xa4kind\xa8transfer" + "\xa6reason\xa1x"
	require.Equal(t, want, string(msg))
}

func TestFailureLongReasonIsCutOnACharacter(t *testing.T) {
	reason := strings.Repeat("é", MaxReasonLen) // two bytes each
	msg, err := EncodeFailure(&Failure{RequestID: "r", Kind: FailPost, Reason: reason})
	require.NoError(t, err)
	got, err := DecodeFailure(msg)
	require.NoError(t, err)
	require.Len(t, got.Reason, MaxReasonLen)
	require.True(t, utf8.ValidString(got.Reason))
}

func TestFailureEncodeRefusesInvalid(t *testing.T) {
	_, err := EncodeFailure(&Failure{})
	require.ErrorContains(t, err, "request_id is empty")
	_, err = EncodeFailure(&Failure{RequestID: "r", Rank: -1})
	require.ErrorContains(t, err, "rank -1 is out of range")
}

func TestFailureDecodeErrors(t *testing.T) {
	good, err := EncodeFailure(&Failure{RequestID: "r", EngineID: "e", Kind: FailPost, Reason: "x"})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		msg  string
		want string
	}{
		"no prefix":   {"PUSH_REG:\x80", `does not start with "PUSH_FAIL:"`},
		"not a map":   {"PUSH_FAIL:\x90", "want a map, got an array"},
		"missing":     {"PUSH_FAIL:\x81\xaarequest_id\xa1r", "engine_id is missing"},
		"empty id":    {"PUSH_FAIL:\x81\xaarequest_id\xa0", "engine_id is missing"},
		"rank type":   {"PUSH_FAIL:\x81\xa4rank\xa1x", "field rank: malformed notification: at byte 16: want an integer, got a string"},
		"negative":    {"PUSH_FAIL:\x81\xa4rank\xff", "rank -1 is negative"},
		"twice":       {"PUSH_FAIL:\x82\xa4kind\xa1x\xa4kind\xa1y", "kind appears twice"},
		"trailing":    {string(good) + "\x00", "1 bytes after the map"},
		"truncated":   {string(good[:len(good)-2]), "field reason: malformed notification: at byte 59: message ends early"},
		"ext unknown": {"PUSH_FAIL:\x81\xa1z\xc7\xff\x01", "value claims 256 bytes but only 1 follow"},
	} {
		f, err := DecodeFailure([]byte(c.msg))
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
		require.Nil(t, f, name)
	}
}

func TestFailureUnknownFieldsSkipped(t *testing.T) {
	msg := "PUSH_FAIL:\x86\xa5extra\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xd6\x01\x00\x00\x00\x00" +
		"\xaarequest_id\xa1r\xa9engine_id\xa1e\xa4rank\x02\xa4kind\xa4post\xa6reason\xa1x"
	got, err := DecodeFailure([]byte(msg))
	require.NoError(t, err)
	require.Equal(t, &Failure{RequestID: "r", EngineID: "e", Rank: 2, Kind: FailPost, Reason: "x"}, got)
	require.Equal(t, `prefill engine "e" rank 2 could not push request "r" (post): x`, got.Error())
}

func FuzzDecodeFailure(f *testing.F) {
	for _, fl := range []*Failure{
		{RequestID: "r", EngineID: "e", Rank: 1, Kind: FailPost, Reason: "x"},
		{RequestID: "cmpl-1-abcdef12", TransferID: "t", EngineID: "prefill", Rank: 7, Kind: FailExpired, Reason: "timeout"},
	} {
		msg, err := EncodeFailure(fl)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	f.Add([]byte("PUSH_FAIL:"))
	f.Add([]byte("PUSH_FAIL:\xdf\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		fl, err := DecodeFailure(msg)
		if err != nil {
			if fl != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v must wrap ErrMalformed and return no failure", err)
			}
			return
		}
		again, err := EncodeFailure(fl)
		if err != nil {
			t.Fatalf("decoded failure does not re-encode: %v", err)
		}
		back, err := DecodeFailure(again)
		if err != nil {
			t.Fatalf("re-encoded failure does not decode: %v", err)
		}
		if len(fl.Reason) <= MaxReasonLen && *back != *fl {
			t.Fatalf("round trip changed %+v into %+v", fl, back)
		}
	})
}
