package pushwire

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestStagedPartRoundTrip(t *testing.T) {
	msg, err := EncodeStagedPart("req-1:x", 4, 0, 12, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != "PUSH_STAGED_PART:0:12:req-1:x:4" {
		t.Fatalf("message %q", msg)
	}
	p, err := DecodeStagedPart(msg)
	if err != nil || p.ID != "req-1:x" || p.N != 4 || p.From != 0 || p.To != 12 || p.Seq != 0 {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	msg, err = EncodeStagedPart("req-1:x", 4, 12, 1024, 1<<40)
	if err != nil || string(msg) != "PUSH_STAGED_PART:12:1024:req-1:x:4#1099511627776" {
		t.Fatalf("message %q, %v", msg, err)
	}
	if p, err := DecodeStagedPart(msg); err != nil || p.ID != "req-1:x" || p.Seq != 1<<40 || p.From != 12 || p.To != 1024 {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	if p, err := DecodeStagedPart([]byte("PUSH_STAGED_PART:999999998:999999999:r:1")); err != nil || p.To != MaxPartBlock {
		t.Fatalf("largest part: %+v, %v", p, err)
	}
}

func TestStagedPartRejects(t *testing.T) {
	for bad, why := range map[string]string{
		"PUSH_STAGED:req:4":                                              "does not start with",
		"PUSH_STAGED_PART:":                                              "no ':' after the first block",
		"PUSH_STAGED_PART:0:req:4":                                       "end block",
		"PUSH_STAGED_PART:0:8":                                           "no ':' after the end block",
		"PUSH_STAGED_PART:8:8:req:4":                                     "blocks [8, 8) are empty",
		"PUSH_STAGED_PART:9:8:req:4":                                     "blocks [9, 8) are empty",
		"PUSH_STAGED_PART:01:8:req:4":                                    "leading zero",
		"PUSH_STAGED_PART:-1:8:req:4":                                    "not a decimal number",
		"PUSH_STAGED_PART:0:1000000000:req:4":                            "longer than 9 digits",
		"PUSH_STAGED_PART:0:8:req:0":                                     "",
		"PUSH_STAGED_PART:0:8::4":                                        "",
		"PUSH_STAGED_PART:0:8:req":                                       "",
		"PUSH_STAGED_PART:0:8:req:4#":                                    "",
		"PUSH_STAGED_PART:0:8:req:4#0":                                   "",
		"PUSH_STAGED_PART:0:8:" + strings.Repeat("x", MaxIDLen+1) + ":4": "",
	} {
		_, err := DecodeStagedPart([]byte(bad))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "PUSH_STAGED_PART") {
			t.Fatalf("%q: err = %v, want ErrMalformed naming %q", bad, err, why)
		}
	}
	for _, bad := range [][2]int{{0, 0}, {3, 2}, {-1, 2}, {0, MaxPartBlock + 1}} {
		if _, err := EncodeStagedPart("r", 1, bad[0], bad[1], 0); !errors.Is(err, ErrMalformed) {
			t.Fatalf("blocks [%d, %d): err = %v", bad[0], bad[1], err)
		}
	}
	if _, err := EncodeStagedPart("", 1, 0, 1, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty id: err = %v", err)
	}
}

func FuzzDecodeStagedPart(f *testing.F) {
	f.Add([]byte("PUSH_STAGED_PART:0:8:req-1:2"))
	f.Add([]byte("PUSH_STAGED_PART:7:9:a:b:1"))
	f.Add([]byte("PUSH_STAGED_PART:7:1024:a:b:1#9"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		p, err := DecodeStagedPart(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if p.From < 0 || p.To <= p.From || p.To > MaxPartBlock {
			t.Fatalf("decoded blocks [%d, %d)", p.From, p.To)
		}
		again, err := EncodeStagedPart(p.ID, p.N, p.From, p.To, p.Seq)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", p, err)
		}
		if !bytes.Equal(again, msg) {
			t.Fatalf("decoded %+v re-encodes as %q, not %q", p, again, msg)
		}
	})
}

func TestRegistrationStagingParts(t *testing.T) {
	r := sampleRegistration()
	r.Staging = &Staging{Slot: 3, Offsets: []uint64{0, 4096}, Sizes: []uint64{4096, 4096}}
	without, err := EncodeRegistration(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Staging.Parts = true
	msg, err := EncodeRegistration(r)
	if err != nil {
		t.Fatal(err)
	}
	// The key follows "staging", with version 1; the rest is unchanged.
	if want := append(bytes.Clone(without[len(RegPrefix)+1:]), "\xadstaging_parts\x01"...); !bytes.Equal(msg[len(RegPrefix)+1:], want) {
		t.Fatalf("encoding %x, want %x after the map header", msg, want)
	}
	got, err := DecodeRegistration(msg)
	if err != nil || !equalRegistration(got, r) || !got.Staging.Parts {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	// A later version still understands version 1's parts.
	q := *r
	q.Staging = &Staging{Slot: 3, Offsets: []uint64{0, 4096}, Sizes: []uint64{4096, 4096}}
	if got, err := DecodeRegistration(withKey(t, &q, "staging_parts", uint64(2))); err != nil || !got.Staging.Parts {
		t.Fatalf("version 2: %+v, %v", got, err)
	}
	for _, c := range []struct {
		v    any
		why  string
		keep bool
	}{
		{uint64(0), "staging_parts 0 is reserved", true},
		{"yes", "staging_parts", true},
		{uint64(1), "staging_parts comes without staging", false},
	} {
		q := *r
		st := *r.Staging
		st.Parts = false
		q.Staging = &st
		if !c.keep {
			q.Staging = nil
		}
		_, err := DecodeRegistration(withKey(t, &q, "staging_parts", c.v))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.why) {
			t.Fatalf("staging_parts %v (staging %v): err = %v, want %q", c.v, c.keep, err, c.why)
		}
	}
}

// withKey returns r's registration with one more key at the end of its map.
func withKey(t *testing.T, r *Registration, key string, v any) []byte {
	t.Helper()
	msg, err := EncodeRegistration(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(msg[len(RegPrefix):], &m); err != nil {
		t.Fatal(err)
	}
	n := len(m)
	body := msg[len(RegPrefix)+1:]
	if n >= 15 {
		t.Fatalf("map of %d keys", n)
	}
	extra, err := msgpack.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	val, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(RegPrefix), byte(0x80|(n+1)))
	out = append(append(append(out, body...), extra...), val...)
	return out
}
