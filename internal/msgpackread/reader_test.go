package msgpackread_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/msgpackread"
)

// readCase is one call on a Reader over in: want is the value it returns,
// off where the reader stands after a success, err the whole error text
// after a failure (and over whether the error says OverLimit).
type readCase struct {
	name string
	in   string
	read func(r *msgpackread.Reader) (any, error)
	want any
	off  int
	err  string
	over bool
}

func runCases(t *testing.T, cases []readCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := msgpackread.New([]byte(c.in), 0, nil)
			got, err := c.read(&r)
			if c.err != "" {
				require.EqualError(t, err, c.err)
				var e *msgpackread.Error
				require.True(t, errors.As(err, &e))
				require.Equal(t, c.over, e.OverLimit, "OverLimit")
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			require.Equal(t, c.off, r.Off(), "offset after the read")
		})
	}
}

func peek(r *msgpackread.Reader) (any, error) { return r.Peek() }
func next(n uint64) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.Next(n) }
}
func mapLen(max int) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.MapLen(max) }
}
func arrayLen(max int) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.ArrayLen(max) }
}
func str(max int) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.Str(max) }
}
func bin(max int) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.Bin(max) }
}
func uintRead(r *msgpackread.Reader) (any, error)  { return r.Uint() }
func int64Read(r *msgpackread.Reader) (any, error) { return r.Int64() }
func intIn(lo, hi int) func(*msgpackread.Reader) (any, error) {
	return func(r *msgpackread.Reader) (any, error) { return r.Int(lo, hi) }
}
func number(r *msgpackread.Reader) (any, error) { return r.Number() }
func isNil(r *msgpackread.Reader) (any, error)  { return r.IsNil(), nil }

func TestReaderBytes(t *testing.T) {
	runCases(t, []readCase{
		{name: "peek", in: "\x93", read: peek, want: byte(0x93), off: 0},
		{name: "peek empty", in: "", read: peek, err: "at byte 0: message ends early"},
		{name: "next", in: "abc", read: next(2), want: []byte("ab"), off: 2},
		{name: "next all", in: "abc", read: next(3), want: []byte("abc"), off: 3},
		{name: "next short", in: "abc", read: next(4), err: "at byte 0: message ends early: need 4 more bytes, have 3"},
		{name: "next huge", in: "abc", read: next(math.MaxUint64), err: "at byte 0: message ends early: need 18446744073709551615 more bytes, have 3"},
		{name: "nil", in: "\xc0", read: isNil, want: true, off: 1},
		{name: "not nil", in: "\x01", read: isNil, want: false, off: 0},
		{name: "nil empty", in: "", read: isNil, want: false, off: 0},
	})
}

func TestReaderContainers(t *testing.T) {
	runCases(t, []readCase{
		{name: "fixmap 0", in: "\x80", read: mapLen(-1), want: 0, off: 1},
		{name: "fixmap 1", in: "\x81\x01\x01", read: mapLen(-1), want: 1, off: 1},
		{name: "map16", in: "\xde\x00\x01\x01\x01", read: mapLen(-1), want: 1, off: 3},
		{name: "map32", in: "\xdf\x00\x00\x00\x01\x01\x01", read: mapLen(-1), want: 1, off: 5},
		{name: "map at limit", in: "\x81\x01\x01", read: mapLen(1), want: 1, off: 1},
		{name: "array for map", in: "\x90", read: mapLen(-1), err: "at byte 0: want a map, got an array (0x90)"},
		{name: "empty for map", in: "", read: mapLen(-1), err: "at byte 0: message ends early"},
		{name: "map16 cut", in: "\xde\x00", read: mapLen(-1), err: "at byte 1: message ends early: need 2 more bytes, have 1"},
		{name: "map claims more", in: "\x82\x01\x01\x01", read: mapLen(-1), err: "at byte 0: map claims 2 entries but only 3 bytes follow"},
		{name: "huge map", in: "\xdf\xff\xff\xff\xff", read: mapLen(-1), err: "at byte 0: map claims 4294967295 entries but only 0 bytes follow"},
		{name: "map over limit", in: "\x82\x01\x01\x01\x01", read: mapLen(1), err: "at byte 0: map of 2 entries, limit 1", over: true},
		{name: "fixarray 3", in: "\x93\x01\x02\x03", read: arrayLen(-1), want: 3, off: 1},
		{name: "array16", in: "\xdc\x00\x02\x01\x02", read: arrayLen(-1), want: 2, off: 3},
		{name: "array32", in: "\xdd\x00\x00\x00\x01\xc0", read: arrayLen(-1), want: 1, off: 5},
		{name: "array at limit", in: "\x92\x01\x02", read: arrayLen(2), want: 2, off: 1},
		{name: "map for array", in: "\x80", read: arrayLen(-1), err: "at byte 0: want an array, got a map (0x80)"},
		{name: "nil for array", in: "\xc0", read: arrayLen(-1), err: "at byte 0: want an array, got nil (0xc0)"},
		{name: "array claims more", in: "\x93\x01\x02", read: arrayLen(-1), err: "at byte 0: array claims 3 entries but only 2 bytes follow"},
		{name: "huge array", in: "\xdd\xff\xff\xff\xff", read: arrayLen(-1), err: "at byte 0: array claims 4294967295 entries but only 0 bytes follow"},
		{name: "array over limit", in: "\x93\x01\x02\x03", read: arrayLen(2), err: "at byte 0: array of 3 entries, limit 2", over: true},
		{name: "limit before claim", in: "\xdd\xff\xff\xff\xff", read: arrayLen(8), err: "at byte 0: array of 4294967295 entries, limit 8", over: true},
	})
}

func TestReaderStringsAndBinary(t *testing.T) {
	long := strings.Repeat("x", 300)
	runCases(t, []readCase{
		{name: "fixstr", in: "\xa3abc", read: str(-1), want: "abc", off: 4},
		{name: "empty str", in: "\xa0", read: str(-1), want: "", off: 1},
		{name: "str8", in: "\xd9\x03abc", read: str(-1), want: "abc", off: 5},
		{name: "str16", in: "\xda\x01\x2c" + long, read: str(-1), want: long, off: 303},
		{name: "str32", in: "\xdb\x00\x00\x00\x03abc", read: str(-1), want: "abc", off: 8},
		{name: "str at limit", in: "\xa3abc", read: str(3), want: "abc", off: 4},
		{name: "utf8", in: "\xa2\xc3\xa9", read: str(-1), want: "é", off: 3},
		{name: "int for str", in: "\x01", read: str(-1), err: "at byte 0: want a string, got an integer (0x01)"},
		{name: "bin for str", in: "\xc4\x01a", read: str(-1), err: "at byte 0: want a string, got binary (0xc4)"},
		{name: "str cut", in: "\xa5ab", read: str(-1), err: "at byte 1: string claims 5 bytes but only 2 follow"},
		{name: "str header cut", in: "\xd9", read: str(-1), err: "at byte 1: message ends early: need 1 more bytes, have 0"},
		{name: "huge str", in: "\xdb\xff\xff\xff\xff", read: str(-1), err: "at byte 5: string claims 4294967295 bytes but only 0 follow"},
		{name: "str over limit", in: "\xa3abc", read: str(2), err: "at byte 0: string of 3 bytes, limit 2", over: true},
		{name: "huge str over limit", in: "\xdb\xff\xff\xff\xff", read: str(1024), err: "at byte 0: string of 4294967295 bytes, limit 1024", over: true},
		{name: "not utf8", in: "\xa2\xff\xfe", read: str(-1), err: "at byte 0: string is not valid UTF-8"},
		{name: "bin8", in: "\xc4\x02\x01\x02", read: bin(-1), want: []byte{1, 2}, off: 4},
		{name: "bin16", in: "\xc5\x00\x01\x07", read: bin(-1), want: []byte{7}, off: 4},
		{name: "bin32", in: "\xc6\x00\x00\x00\x01\x07", read: bin(-1), want: []byte{7}, off: 6},
		{name: "empty bin is nil", in: "\xc4\x00", read: bin(-1), want: []byte(nil), off: 2},
		{name: "str for bin", in: "\xa1a", read: bin(-1), err: "at byte 0: want binary, got a string (0xa1)"},
		{name: "bin cut", in: "\xc4\x05\x01", read: bin(-1), err: "at byte 2: message ends early: need 5 more bytes, have 1"},
		{name: "bin over limit", in: "\xc4\x02\x01\x02", read: bin(1), err: "at byte 0: binary of 2 bytes, limit 1", over: true},
	})
}

func TestReaderNumbers(t *testing.T) {
	runCases(t, []readCase{
		{name: "uint fix", in: "\x7f", read: uintRead, want: uint64(127), off: 1},
		{name: "uint8", in: "\xcc\xff", read: uintRead, want: uint64(255), off: 2},
		{name: "uint16", in: "\xcd\xff\xff", read: uintRead, want: uint64(65535), off: 3},
		{name: "uint32", in: "\xce\xff\xff\xff\xff", read: uintRead, want: uint64(math.MaxUint32), off: 5},
		{name: "uint64 max", in: "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", read: uintRead, want: uint64(math.MaxUint64), off: 9},
		{name: "uint from int8", in: "\xd0\x05", read: uintRead, want: uint64(5), off: 2},
		{name: "uint negative fix", in: "\xff", read: uintRead, err: "at byte 0: integer -1 is negative"},
		{name: "uint negative int8", in: "\xd0\x80", read: uintRead, err: "at byte 0: integer -128 is negative"},
		{name: "uint nil", in: "\xc0", read: uintRead, err: "at byte 0: want an integer, got nil (0xc0)"},
		{name: "uint cut", in: "\xcd\x01", read: uintRead, err: "at byte 1: message ends early: need 2 more bytes, have 1"},
		{name: "int64 neg fix", in: "\xe0", read: int64Read, want: int64(-32), off: 1},
		{name: "int16", in: "\xd1\xff\x7f", read: int64Read, want: int64(-129), off: 3},
		{name: "int32", in: "\xd2\x80\x00\x00\x00", read: int64Read, want: int64(math.MinInt32), off: 5},
		{name: "int64 min", in: "\xd3\x80\x00\x00\x00\x00\x00\x00\x00", read: int64Read, want: int64(math.MinInt64), off: 9},
		{name: "int64 max as uint64", in: "\xcf\x7f\xff\xff\xff\xff\xff\xff\xff", read: int64Read, want: int64(math.MaxInt64), off: 9},
		{name: "int64 too large", in: "\xcf\x80\x00\x00\x00\x00\x00\x00\x00", read: int64Read, err: "at byte 0: integer 9223372036854775808 is too large"},
		{name: "int64 float", in: "\xca\x00\x00\x00\x00", read: int64Read, err: "at byte 0: want an integer, got a float (0xca)"},
		{name: "int64 string", in: "\xa1x", read: int64Read, err: "at byte 0: want an integer, got a string (0xa1)"},
		{name: "int in range", in: "\x0a", read: intIn(0, 10), want: 10, off: 1},
		{name: "int above", in: "\x0b", read: intIn(0, 10), err: "at byte 0: integer 11 is above 10"},
		{name: "int below zero", in: "\xff", read: intIn(0, 10), err: "at byte 0: integer -1 is below 0"},
		{name: "int below one", in: "\x00", read: intIn(1, 10), err: "at byte 0: integer 0 is below 1"},
		{name: "int negative range", in: "\xfb", read: intIn(-5, -1), want: -5, off: 1},
		{name: "int under negative range", in: "\xfa", read: intIn(-5, -1), err: "at byte 0: integer -6 is below -5"},
		{name: "int over negative range", in: "\x00", read: intIn(-5, -1), err: "at byte 0: integer 0 is above -1"},
		{name: "negative over negative range", in: "\xff", read: intIn(-10, -5), err: "at byte 0: integer -1 is above -5"},
		{name: "uint64 over int range", in: "\xcf\x80\x00\x00\x00\x00\x00\x00\x00", read: intIn(0, math.MaxInt32), err: "at byte 0: integer 9223372036854775808 is above 2147483647"},
		{name: "int64 min under range", in: "\xd3\x80\x00\x00\x00\x00\x00\x00\x00", read: intIn(0, 1), err: "at byte 0: integer -9223372036854775808 is below 0"},
		{name: "float32", in: "\xca\x3f\xc0\x00\x00", read: number, want: 1.5, off: 5},
		{name: "float64", in: "\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", read: number, want: 1.5, off: 9},
		{name: "number from int", in: "\x05", read: number, want: 5.0, off: 1},
		{name: "number from negative", in: "\xff", read: number, want: -1.0, off: 1},
		{name: "number from uint64", in: "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", read: number, want: float64(math.MaxUint64), off: 9},
		{name: "number string", in: "\xa1a", read: number, err: "at byte 0: want a number, got a string (0xa1)"},
		{name: "float64 cut", in: "\xcb\x00", read: number, err: "at byte 1: message ends early: need 8 more bytes, have 1"},
	})
}

func TestSkipConsumesExactlyOneValue(t *testing.T) {
	for name, v := range map[string]string{
		"posfix": "\x01", "negfix": "\xe0", "nil": "\xc0", "false": "\xc2", "true": "\xc3",
		"map": "\x81\xa1a\x01", "map16": "\xde\x00\x01\x01\x01", "array": "\x92\x01\x02",
		"array32": "\xdd\x00\x00\x00\x01\x01", "str": "\xa3abc", "str8": "\xd9\x01a",
		"bin8": "\xc4\x02\x01\x02", "bin16": "\xc5\x00\x01\x01", "bin32": "\xc6\x00\x00\x00\x01\x01",
		"ext8": "\xc7\x01\x05\xaa", "ext16": "\xc8\x00\x01\x05\xaa", "ext32": "\xc9\x00\x00\x00\x01\x05\xaa",
		"fixext1": "\xd4\x05\xaa", "fixext16": "\xd8\x05" + strings.Repeat("\xaa", 16),
		"float32": "\xca\x00\x00\x00\x00", "float64": "\xcb" + strings.Repeat("\x00", 8),
		"uint8": "\xcc\x01", "uint64": "\xcf" + strings.Repeat("\x00", 8), "int8": "\xd0\x01",
		"int64":  "\xd3" + strings.Repeat("\x00", 8),
		"nested": "\x82\xa1a\x92\x01\x81\xa1b\xc0\xa1c\xc4\x00",
	} {
		r := msgpackread.New([]byte(v+"\x7f"), 0, nil) // a value after it stays
		require.NoError(t, r.Skip(), name)
		require.Equal(t, len(v), r.Off(), name)
	}
}

func TestSkipRefuses(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("\x91", n) + "\x01" }
	for _, c := range []struct{ name, in, err string }{
		{"empty", "", "at byte 0: message ends early"},
		{"unused code", "\xc1", "at byte 0: invalid msgpack code 0xc1"},
		{"ext cut", "\xc7\xff\x01", "at byte 2: value claims 256 bytes but only 1 follow"},
		{"bin cut", "\xc6\xff\xff\xff\xff", "at byte 5: value claims 4294967295 bytes but only 0 follow"},
		{"float cut", "\xcb\x00\x00", "at byte 1: value claims 8 bytes but only 2 follow"},
		{"ext header cut", "\xc8\x00", "at byte 1: message ends early: need 2 more bytes, have 1"},
		{"map claims more", "\x81\x01", "at byte 0: map claims 1 entries but only 1 bytes follow"},
		{"array element cut", "\x92\x92\x01\x01", "at byte 4: message ends early"},
		{"bad string inside", "\x91\xa2\xff\xfe", "at byte 1: string is not valid UTF-8"},
		{"too deep", nest(msgpackread.MaxDepth), "at byte 32: value nested deeper than 32 levels"},
		{"too deep in a map", strings.Repeat("\x81\x01", msgpackread.MaxDepth) + "\x01", "at byte 63: value nested deeper than 32 levels"},
	} {
		r := msgpackread.New([]byte(c.in), 0, nil)
		require.EqualError(t, r.Skip(), c.err, c.name)
	}
	r := msgpackread.New([]byte(nest(msgpackread.MaxDepth-1)), 0, nil)
	require.NoError(t, r.Skip(), "%d levels, the leaf included, are skipped", msgpackread.MaxDepth)
	require.Equal(t, 0, r.Left())
}

func TestSkipAllocatesNothing(t *testing.T) {
	in := []byte("\x83\xa1a\x92\xa3abc\xc4\x02\x01\x02\xa1b\x81\xa1c\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xa1d\xd4\x01\x00")
	allocs := testing.AllocsPerRun(100, func() {
		r := msgpackread.New(in, 0, nil)
		if err := r.Skip(); err != nil || r.Left() != 0 {
			t.Fatalf("skip: %v, %d left", err, r.Left())
		}
	})
	require.Zero(t, allocs)
}

var errCodec = errors.New("codec: malformed")

func TestWrapAndOffsets(t *testing.T) {
	wrap := func(e *msgpackread.Error) error { return errors.Join(errCodec, e) }
	msg := []byte("PFX:\x90")
	r := msgpackread.New(msg, 4, wrap)
	_, err := r.MapLen(-1)
	require.ErrorIs(t, err, errCodec)
	var e *msgpackread.Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, msgpackread.Error{Off: 4, Msg: "want a map, got an array (0x90)"}, *e, "offsets count the prefix")

	r = msgpackread.New(msg, 4, wrap)
	n, err := r.ArrayLen(-1)
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualError(t, r.Errorf("array of %d, want 3", n), "codec: malformed\nat byte 5: array of 0, want 3")
	require.EqualError(t, r.ErrorAt(4, "here"), "codec: malformed\nat byte 4: here")

	r = msgpackread.New(msg, 99, nil)
	require.Equal(t, len(msg), r.Off(), "an offset past the end is clamped")
	r = msgpackread.New(msg, -1, nil)
	require.Equal(t, 0, r.Off(), "a negative offset is clamped")
}

func TestSlicesAliasAndBinCopies(t *testing.T) {
	in := []byte("\xa2ab\xc4\x02xy\xc4\x02xy")
	r := msgpackread.New(in, 0, nil)
	s, err := r.RawStr(-1)
	require.NoError(t, err)
	b, err := r.RawBin(-1)
	require.NoError(t, err)
	c, err := r.Bin(-1)
	require.NoError(t, err)
	in[1], in[5], in[9] = 'A', 'X', 'X'
	require.Equal(t, "Ab", string(s), "RawStr aliases the input")
	require.Equal(t, "Xy", string(b), "RawBin aliases the input")
	require.Equal(t, "xy", string(c), "Bin copies")
}
