package sidechannel

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

type shapeProbe struct {
	R []struct{ A int } `msgpack:"r"`
	S string            `msgpack:"s"`
}

func TestDecodeRefusesHugeClaims(t *testing.T) {
	cases := map[string]struct {
		body []byte
		want string
	}{
		// A map whose "r" array claims 2^32-1 elements: without the check
		// msgpack/v5 allocates them all before reading one.
		"array32 claim":  {[]byte{0x81, 0xa1, 'r', 0xdd, 0xff, 0xff, 0xff, 0xff}, "claims 4294967295 elements"},
		"map32 claim":    {[]byte{0xdf, 0x7f, 0xff, 0xff, 0xff}, "claims 4294967294 elements"},
		"str32 claim":    {[]byte{0x81, 0xa1, 's', 0xdb, 0xff, 0xff, 0xff, 0xff}, "claims 4294967295 bytes"},
		"truncated":      {[]byte{0x92, 0x91, 0x01}, "truncated msgpack value"},
		"reserved byte":  {[]byte{0xc1}, "reserved msgpack byte 0xc1"},
		"nesting bomb":   {[]byte(strings.Repeat("\x91", 1000) + "\x01"), "nesting deeper than 32"},
		"length cut off": {[]byte{0xdd, 0x00}, "truncated msgpack length"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var v shapeProbe
			err := Decode(c.body, &v)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode: got %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestShapeAcceptsWhatMsgpackWrites(t *testing.T) {
	in := map[string]any{
		"a": []any{1, -1, 300, -300, 70000, 1 << 40, -(1 << 40), 1.5, float32(2.5), true, false, nil},
		"b": []byte(strings.Repeat("x", 70000)),
		"c": strings.Repeat("y", 300),
		"d": map[string]any{"e": []int{}, "f": map[string]int{}},
	}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	n, err := checkShape(b)
	if err != nil {
		t.Fatalf("checkShape refused msgpack's own encoding: %v", err)
	}
	if n != len(b) {
		t.Fatalf("checkShape consumed %d of %d bytes", n, len(b))
	}
}

func FuzzCheckShape(f *testing.F) {
	f.Add([]byte{0x81, 0xa1, 'r', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x92, 0xc7, 0x01, 0x05, 0x00, 0xd8, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := checkShape(b)
		if err == nil && n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		var v any
		_ = Decode(b, &v) // must not panic or exhaust memory
	})
}
