package pushwire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type vectorCase struct {
	Name   string         `json:"name"`
	Valid  bool           `json:"valid"`
	Hex    string         `json:"hex"`
	Expect map[string]any `json:"expect"`
	Note   string         `json:"note"`
}

func loadVectors(t testing.TB) []vectorCase {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/push_reg.json")
	require.NoError(t, err)
	var file struct {
		Cases []vectorCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.NotEmpty(t, file.Cases)
	return file.Cases
}

// expectedRegistration converts a vector's JSON expectation; known reports
// whether every key is one that Registration carries.
func expectedRegistration(t *testing.T, m map[string]any) (reg Registration, known bool) {
	t.Helper()
	num := func(k string) int { return int(m[k].(float64)) }
	str := func(k string) string { return m[k].(string) }
	reg = Registration{
		RequestID: str("request_id"), DecodeEngineID: str("decode_engine_id"),
		DecodeHost: str("decode_host"), DecodePort: num("decode_port"), DecodeTPSize: num("decode_tp_size"),
		RemoteEngineID: str("remote_engine_id"), RemoteHost: str("remote_host"),
		RemotePort: num("remote_port"), RemoteTPSize: num("remote_tp_size"), RemotePPSize: num("remote_pp_size"),
	}
	if tid, ok := m["transfer_id"]; ok {
		reg.TransferID = tid.(string)
	}
	for _, g := range m["local_block_ids"].([]any) {
		ids := []int{}
		for _, id := range g.([]any) {
			ids = append(ids, int(id.(float64)))
		}
		reg.LocalBlockIDs = append(reg.LocalBlockIDs, ids)
	}
	known = true
	for k := range m {
		if !strings.Contains(strings.Join(regFieldNames, ","), k) {
			known = false
		}
	}
	return reg, known
}

func TestRegistrationVectors(t *testing.T) {
	cases := loadVectors(t)
	var valid, invalid int
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			msg, err := hex.DecodeString(c.Hex)
			require.NoError(t, err)
			got, err := DecodeRegistration(msg)
			if !c.Valid {
				invalid++
				require.Error(t, err, c.Note)
				require.ErrorIs(t, err, ErrMalformed)
				require.Nil(t, got)
				return
			}
			valid++
			require.NoError(t, err, c.Note)
			want, known := expectedRegistration(t, c.Expect)
			require.Equal(t, want, *got)
			if known {
				enc, err := EncodeRegistration(&want)
				require.NoError(t, err)
				require.Equal(t, c.Hex, hex.EncodeToString(enc), "encoding must be byte-identical to the vector")
			}
		})
	}
	require.Equal(t, 8, valid, "valid vectors exercised")
	require.Equal(t, 10, invalid, "invalid vectors exercised")
}

func TestRegistrationInvalidVectorsSayWhatIsWrong(t *testing.T) {
	want := map[string]string{
		"no_prefix":          `does not start with "PUSH_REG:"`,
		"truncated":          "string claims 15 bytes but only 0 follow",
		"not_a_map":          "want a map, got an array",
		"missing_request_id": "request_id is missing",
		"block_ids_strings":  "want an integer, got a string",
		"negative_block_id":  "block id -5 is negative",
		"port_out_of_range":  "decode_port 70000 is outside 0..65535",
		"tp_zero":            "decode_tp_size 0 is below 1",
		"huge_array_header":  "at byte 26: array claims 4294967295 entries but only 0 bytes follow",
		"empty":              `does not start with "PUSH_REG:"`,
	}
	for _, c := range loadVectors(t) {
		if c.Valid {
			continue
		}
		msg, _ := hex.DecodeString(c.Hex)
		_, err := DecodeRegistration(msg)
		require.ErrorContains(t, err, want[c.Name], c.Name)
		delete(want, c.Name)
	}
	require.Empty(t, want, "every invalid vector named here exists in the file")
}

func sampleRegistration() *Registration {
	return &Registration{
		RequestID: "cmpl-1-0-deadbeef", DecodeEngineID: "dec", DecodeHost: "127.0.0.1", DecodePort: 5601,
		DecodeTPSize: 2, LocalBlockIDs: [][]int{{1, 2, 300, 70000, 1 << 40}}, RemoteEngineID: "pre",
		RemoteHost: "127.0.0.1", RemotePort: 5600, RemoteTPSize: 1, RemotePPSize: 1, TransferID: "t-1",
	}
}

func TestRegistrationRoundTrip(t *testing.T) {
	r := sampleRegistration()
	msg, err := EncodeRegistration(r)
	require.NoError(t, err)
	require.True(t, IsRegistration(msg))
	got, err := DecodeRegistration(msg)
	require.NoError(t, err)
	require.Equal(t, r, got)

	r.TransferID = ""
	msg, err = AppendRegistration([]byte("keep"), r)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(msg, []byte("keep"+RegPrefix)))
	require.NotContains(t, string(msg), "transfer_id", "an empty transfer id is omitted")
}

func TestRegistrationEncodeRefusesInvalid(t *testing.T) {
	for name, mutate := range map[string]func(*Registration){
		"request_id":      func(r *Registration) { r.RequestID = "" },
		"decode_port":     func(r *Registration) { r.DecodePort = 65536 },
		"remote_pp_size":  func(r *Registration) { r.RemotePPSize = 0 },
		"local_block_ids": func(r *Registration) { r.LocalBlockIDs[0][1] = -1 },
	} {
		r := sampleRegistration()
		mutate(r)
		out, err := AppendRegistration([]byte("x"), r)
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, name)
		require.Equal(t, []byte("x"), out, "dst unchanged on error")
	}
}

func TestRegistrationDecodeStrictness(t *testing.T) {
	good, err := EncodeRegistration(sampleRegistration())
	require.NoError(t, err)
	cases := map[string]struct {
		msg  []byte
		want string
	}{
		"trailing bytes": {append(bytes.Clone(good), 0x01), "1 bytes after the map"},
		"repeated key": {
			// map of 12 claimed as 13, with request_id once more at the end.
			append(append([]byte(RegPrefix+"\x8d"), good[len(RegPrefix)+1:]...), "\xaarequest_id\xa1x"...),
			"request_id appears twice",
		},
		"deep nesting in unknown field": {
			append(append([]byte(RegPrefix+"\x81\xa1z"), bytes.Repeat([]byte{0x91}, 100)...), 0x01),
			"nested deeper than 32 levels",
		},
		"nil transfer id is accepted, other nil is not": {
			[]byte(RegPrefix + "\x81\xabdecode_port\xc0"), "want an integer, got nil",
		},
		"key not a string": {[]byte(RegPrefix + "\x81\x01\x01"), "want a string, got an integer"},
		"invalid utf8":     {[]byte(RegPrefix + "\x81\xa2\xff\xfe\x01"), "not valid UTF-8"},
		"uint64 too large": {[]byte(RegPrefix + "\x81\xabdecode_port\xcf\xff\xff\xff\xff\xff\xff\xff\xff"), "too large"},
		"huge map header":  {[]byte(RegPrefix + "\xdf\xff\xff\xff\xff"), "map claims 4294967295 entries"},
		"huge string":      {[]byte(RegPrefix + "\x81\xdb\xff\xff\xff\xff"), "string claims 4294967295 bytes"},
	}
	for name, c := range cases {
		_, err := DecodeRegistration(c.msg)
		require.ErrorIs(t, err, ErrMalformed, name)
		require.ErrorContains(t, err, c.want, name)
	}

	r := sampleRegistration()
	r.TransferID = ""
	msg, err := EncodeRegistration(r)
	require.NoError(t, err)
	msg[len(RegPrefix)]++ // one more entry: transfer_id = nil
	msg = append(msg, "\xabtransfer_id\xc0"...)
	got, err := DecodeRegistration(msg)
	require.NoError(t, err)
	require.Equal(t, r, got)
}

func TestRegistrationDecodeIncarnation(t *testing.T) {
	r := sampleRegistration()
	plain, err := EncodeRegistration(r)
	require.NoError(t, err)
	for _, inc := range []uint64{1, 127, 128, 1 << 32, 1<<63 + 5, ^uint64(0)} {
		r.DecodeIncarnation = inc
		msg, err := EncodeRegistration(r)
		require.NoError(t, err)
		// The key comes last, after the vLLM keys, which keep their bytes.
		require.Equal(t, plain[len(RegPrefix)]+1, msg[len(RegPrefix)], "one more map entry")
		require.Equal(t, plain[len(RegPrefix)+1:], msg[len(RegPrefix)+1:len(plain)])
		tail := msg[len(plain):]
		require.True(t, bytes.HasPrefix(tail, []byte("\xb2decode_incarnation")), "%x", tail)
		got, err := DecodeRegistration(msg)
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	r.DecodeIncarnation = 1<<63 + 5
	msg, err := EncodeRegistration(r)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(msg, []byte("\xcf\x80\x00\x00\x00\x00\x00\x00\x05")), "uint64 above int64: %x", msg[len(msg)-9:])

	head := plain[:len(RegPrefix)]
	withKey := func(value string) []byte {
		m := append(bytes.Clone(head), plain[len(RegPrefix)]+1)
		m = append(m, plain[len(RegPrefix)+1:]...)
		return append(m, "\xb2decode_incarnation"+value...)
	}
	got, err := DecodeRegistration(withKey("\xc0"))
	require.NoError(t, err, "nil says nothing, like a missing key")
	require.Zero(t, got.DecodeIncarnation)
	got, err = DecodeRegistration(withKey("\xd3\x00\x00\x00\x00\x00\x00\x00\x09"))
	require.NoError(t, err, "a non-negative signed encoding is accepted")
	require.Equal(t, uint64(9), got.DecodeIncarnation)
	for value, want := range map[string]string{
		"\x00":     `field decode_incarnation: malformed notification: at byte `,
		"\xff":     "integer -1 is negative",
		"\xa1x":    "want an integer, got a string",
		"\xcf\x00": "message ends early",
	} {
		_, err := DecodeRegistration(withKey(value))
		require.ErrorIs(t, err, ErrMalformed, "%x", value)
		require.ErrorContains(t, err, want, "%x", value)
	}
	_, err = DecodeRegistration(withKey("\x00"))
	require.ErrorContains(t, err, "incarnation 0 is reserved")
}

func FuzzDecodeRegistration(f *testing.F) {
	for _, c := range loadVectors(f) {
		msg, err := hex.DecodeString(c.Hex)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	withInc := sampleRegistration()
	withInc.DecodeIncarnation = 0x9e3779b97f4a7c15
	if msg, err := EncodeRegistration(withInc); err == nil {
		f.Add(msg)
	}
	withInc.Staging = &Staging{Slot: 2, Offsets: []uint64{0, 1 << 20}, Sizes: []uint64{1 << 20, 1 << 20}}
	if msg, err := EncodeRegistration(withInc); err == nil {
		f.Add(msg)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		reg, err := DecodeRegistration(msg)
		if err != nil {
			if reg != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v must wrap ErrMalformed and return no registration", err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same value.
		again, err := EncodeRegistration(reg)
		if err != nil {
			t.Fatalf("decoded registration does not re-encode: %v", err)
		}
		back, err := DecodeRegistration(again)
		if err != nil {
			t.Fatalf("re-encoded registration does not decode: %v", err)
		}
		if !equalRegistration(reg, back) {
			t.Fatalf("round trip changed %+v into %+v", reg, back)
		}
	})
}

func equalRegistration(a, b *Registration) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
