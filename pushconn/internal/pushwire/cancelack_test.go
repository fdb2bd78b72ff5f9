package pushwire

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCancelAckRoundTrip(t *testing.T) {
	for _, a := range []*CancelAck{
		{RequestID: "r-1", EngineID: "prefill", Rank: 3},
		{RequestID: "r-2", TransferID: "t-9", EngineID: "", Rank: 0},
	} {
		msg, err := EncodeCancelAck(a)
		require.NoError(t, err)
		require.True(t, IsCancelAck(msg))
		require.False(t, IsCancel(msg), "PUSH_CANCEL_ACK must not look like PUSH_CANCEL")
		require.False(t, IsFailure(msg))
		require.False(t, IsRegistration(msg))
		got, err := DecodeCancelAck(msg)
		require.NoError(t, err)
		require.Equal(t, a, got)
	}
	c, err := EncodeCancel(&Cancel{RequestID: "r", EngineID: "e"})
	require.NoError(t, err)
	require.False(t, IsCancelAck(c), "PUSH_CANCEL must not look like PUSH_CANCEL_ACK")
}

func TestCancelAckExactBytes(t *testing.T) {
	msg, err := EncodeCancelAck(&CancelAck{RequestID: "r", TransferID: "t", EngineID: "e", Rank: 1})
	require.NoError(t, err)
	want := "PUSH_CANCEL_ACK:\x84" + "\xaarequest_id\xa1r" + "\xabtransfer_id\xa1t" + "\xa9engine_id\xa1e" + "\xa4rank\x01"
	require.Equal(t, want, string(msg))
	msg, err = EncodeCancelAck(&CancelAck{RequestID: "r", EngineID: "e", Rank: 200})
	require.NoError(t, err)
	require.Equal(t, "PUSH_CANCEL_ACK:\x83\xaarequest_id\xa1r\xa9engine_id\xa1e\xa4rank\xcc\xc8", string(msg))
}

func TestCancelAckEncodeRefusesInvalid(t *testing.T) {
	_, err := EncodeCancelAck(&CancelAck{})
	require.ErrorContains(t, err, "PUSH_CANCEL_ACK field request_id is empty")
	_, err = EncodeCancelAck(&CancelAck{RequestID: "r", Rank: -1})
	require.ErrorContains(t, err, "PUSH_CANCEL_ACK field rank -1 is out of range")
	_, err = EncodeCancelAck(&CancelAck{RequestID: strings.Repeat("r", MaxIDLen+1)})
	require.ErrorIs(t, err, ErrTooLong)
	require.ErrorContains(t, err, "PUSH_CANCEL_ACK field request_id is 1025 bytes, limit 1024")
}

func TestCancelAckDecodeErrors(t *testing.T) {
	good, err := EncodeCancelAck(&CancelAck{RequestID: "r", EngineID: "e", Rank: 1})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		msg  string
		want string
	}{
		"no prefix": {"PUSH_CANCEL:\x80", `does not start with "PUSH_CANCEL_ACK:"`},
		"not a map": {"PUSH_CANCEL_ACK:\x90", "want a map, got an array"},
		"missing":   {"PUSH_CANCEL_ACK:\x81\xaarequest_id\xa1r", "engine_id is missing"},
		"no rank":   {"PUSH_CANCEL_ACK:\x82\xaarequest_id\xa1r\xa9engine_id\xa1e", "rank is missing"},
		"empty id":  {"PUSH_CANCEL_ACK:\x83\xaarequest_id\xa0\xa9engine_id\xa1e\xa4rank\x00", "request_id is empty"},
		"rank type": {"PUSH_CANCEL_ACK:\x81\xa4rank\xa1x", "field rank: malformed notification"},
		"negative":  {"PUSH_CANCEL_ACK:\x81\xa4rank\xff", "rank -1 is negative"},
		"twice":     {"PUSH_CANCEL_ACK:\x82\xa9engine_id\xa1x\xa9engine_id\xa1y", "engine_id appears twice"},
		"trailing":  {string(good) + "\x00", "1 bytes after the map"},
		"truncated": {string(good[:len(good)-1]), "message ends early"},
		"long id":   {"PUSH_CANCEL_ACK:\x81\xaarequest_id\xda\x04\x01" + strings.Repeat("x", 1025), "string of 1025 bytes, limit 1024"},
	} {
		got, err := DecodeCancelAck([]byte(c.msg))
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
		require.Nil(t, got, name)
	}
}

func TestCancelAckUnknownFieldsSkipped(t *testing.T) {
	msg := "PUSH_CANCEL_ACK:\x84\xa5extra\x92\xc3\xa1z" +
		"\xaarequest_id\xa1r\xa9engine_id\xa1e\xa4rank\x02"
	got, err := DecodeCancelAck([]byte(msg))
	require.NoError(t, err)
	require.Equal(t, &CancelAck{RequestID: "r", EngineID: "e", Rank: 2}, got)
}

// Every push message refuses ids longer than MaxIDLen when decoding, with
// an error that matches ErrTooLong, and its encoder refuses to write them.
func TestIDsLongerThanMaxIDLenAreRefused(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	ok := strings.Repeat("x", MaxIDLen)
	reg := func(mod func(*Registration)) *Registration {
		r := &Registration{RequestID: "r", DecodeEngineID: "d", DecodeHost: "h", DecodePort: 1, DecodeTPSize: 1,
			LocalBlockIDs: [][]int{{1}}, RemoteEngineID: "p", RemoteHost: "h", RemotePort: 2, RemoteTPSize: 1, RemotePPSize: 1}
		mod(r)
		return r
	}
	_, err := EncodeRegistration(reg(func(r *Registration) { r.RequestID = ok; r.TransferID = ok }))
	require.NoError(t, err, "MaxIDLen itself is allowed")
	for name, mod := range map[string]func(*Registration){
		"request_id":       func(r *Registration) { r.RequestID = long },
		"transfer_id":      func(r *Registration) { r.TransferID = long },
		"decode_engine_id": func(r *Registration) { r.DecodeEngineID = long },
		"decode_host":      func(r *Registration) { r.DecodeHost = long },
		"remote_engine_id": func(r *Registration) { r.RemoteEngineID = long },
		"remote_host":      func(r *Registration) { r.RemoteHost = long },
	} {
		_, err := EncodeRegistration(reg(mod))
		require.ErrorIs(t, err, ErrTooLong, name)
		require.ErrorContains(t, err, "field "+name+" is 1025 bytes", name)
	}
	// A message some other encoder made with a long request id.
	good, err := EncodeRegistration(reg(func(r *Registration) { r.RequestID = "R" }))
	require.NoError(t, err)
	bad := strings.Replace(string(good), "\xaarequest_id\xa1R", "\xaarequest_id\xda\x04\x01"+long, 1)
	_, err = DecodeRegistration([]byte(bad))
	require.ErrorIs(t, err, ErrTooLong)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeCancel([]byte("PUSH_CANCEL:\x81\xabtransfer_id\xda\x04\x01" + long))
	require.ErrorIs(t, err, ErrTooLong)
	_, err = DecodeFailure([]byte("PUSH_FAIL:\x81\xa9engine_id\xda\x04\x01" + long))
	require.ErrorIs(t, err, ErrTooLong)
	_, err = EncodeFailure(&Failure{RequestID: long})
	require.ErrorIs(t, err, ErrTooLong)
	_, err = EncodeCancel(&Cancel{RequestID: long})
	require.ErrorIs(t, err, ErrTooLong)
}

func TestRegistrationSeqRoundTrip(t *testing.T) {
	r := &Registration{RequestID: "r", DecodeEngineID: "d", DecodeHost: "h", DecodePort: 1, DecodeTPSize: 1,
		LocalBlockIDs: [][]int{{1}}, RemoteEngineID: "p", RemoteHost: "h", RemotePort: 2, RemoteTPSize: 1, RemotePPSize: 1,
		DecodeIncarnation: 9, Seq: 1 << 40}
	msg, err := EncodeRegistration(r)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(msg), "\xb0registration_seq\xcf\x00\x00\x01\x00\x00\x00\x00\x00"))
	got, err := DecodeRegistration(msg)
	require.NoError(t, err)
	require.Equal(t, r, got)
	bad := strings.Replace(string(msg), "\xb0registration_seq\xcf\x00\x00\x01\x00\x00\x00\x00\x00", "\xb0registration_seq\x00", 1)
	_, err = DecodeRegistration([]byte(bad))
	require.ErrorContains(t, err, "registration_seq 0 is reserved")
}

func FuzzDecodeCancelAck(f *testing.F) {
	for _, a := range []*CancelAck{
		{RequestID: "r", EngineID: "e", Rank: 1},
		{RequestID: "cmpl-1-abcdef12", TransferID: "t", EngineID: "prefill", Rank: 7},
	} {
		msg, err := EncodeCancelAck(a)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	f.Add([]byte("PUSH_CANCEL_ACK:"))
	f.Add([]byte("PUSH_CANCEL_ACK:\xdf\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		a, err := DecodeCancelAck(msg)
		if err != nil {
			if a != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v must wrap ErrMalformed and return no ack", err)
			}
			return
		}
		again, err := EncodeCancelAck(a)
		if err != nil {
			t.Fatalf("decoded ack does not re-encode: %v", err)
		}
		back, err := DecodeCancelAck(again)
		if err != nil {
			t.Fatalf("re-encoded ack does not decode: %v", err)
		}
		if *back != *a {
			t.Fatalf("round trip changed %+v into %+v", a, back)
		}
	})
}

// The optional registration_seq key of PUSH_CANCEL, PUSH_CANCEL_ACK and
// PUSH_FAIL: written last and only when set, read back, nil taken as
// absent, 0 refused.
func TestSeqKeyRoundTrips(t *testing.T) {
	c, err := EncodeCancel(&Cancel{RequestID: "r", EngineID: "d", Rank: 1, Seq: 7})
	require.NoError(t, err)
	gotC, err := DecodeCancel(c)
	require.NoError(t, err)
	require.Equal(t, uint64(7), gotC.Seq)
	a, err := EncodeCancelAck(&CancelAck{RequestID: "r", EngineID: "p", Rank: 0, Seq: 7})
	require.NoError(t, err)
	gotA, err := DecodeCancelAck(a)
	require.NoError(t, err)
	require.Equal(t, uint64(7), gotA.Seq)
	f, err := EncodeFailure(&Failure{RequestID: "r", EngineID: "p", Rank: 0, Kind: FailPost, Reason: "x", Seq: 9})
	require.NoError(t, err)
	gotF, err := DecodeFailure(f)
	require.NoError(t, err)
	require.Equal(t, uint64(9), gotF.Seq)
	// Without a seq the bytes are those of before the key existed.
	plain, err := EncodeCancel(&Cancel{RequestID: "r", EngineID: "d", Rank: 1})
	require.NoError(t, err)
	require.NotContains(t, string(plain), "registration_seq")
	zero := append(plain[:len(plain):len(plain)], []byte{}...)
	zero[len(CancelPrefix)]++ // one more map entry
	zero = append(zero, 0xb0)
	zero = append(zero, "registration_seq"...)
	zero = append(zero, 0x00)
	_, err = DecodeCancel(zero)
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), "registration_seq 0 is reserved")
}
