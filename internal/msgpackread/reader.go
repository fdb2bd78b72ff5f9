package msgpackread

import (
	"encoding/binary"
	"unicode/utf8"
)

// Reader reads msgpack values from one message, front to back. Byte slices
// it returns (Next, RawStr, RawBin) alias the input.
type Reader struct {
	b    []byte
	off  int
	wrap func(*Error) error
}

// New returns a Reader over b that starts at byte off (after a prefix the
// caller has checked; clamped to [0, len(b)]). wrap turns each *Error into
// the error the caller returns, typically one that also wraps the codec's
// sentinel; nil returns the *Error itself.
func New(b []byte, off int, wrap func(*Error) error) Reader {
	off = min(max(off, 0), len(b))
	return Reader{b: b, off: off, wrap: wrap}
}

// Off is the offset of the next byte to read.
func (r *Reader) Off() int { return r.off }

// Left is the number of bytes not read yet.
func (r *Reader) Left() int { return len(r.b) - r.off }

// Peek returns the next byte without consuming it.
func (r *Reader) Peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.Errorf("message ends early")
	}
	return r.b[r.off], nil
}

func (r *Reader) code() (byte, error) {
	c, err := r.Peek()
	if err == nil {
		r.off++
	}
	return c, err
}

// Next consumes the next n bytes.
func (r *Reader) Next(n uint64) ([]byte, error) {
	if n > uint64(r.Left()) {
		return nil, r.Errorf("message ends early: need %d more bytes, have %d", n, r.Left())
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

// uintN reads an n-byte big-endian unsigned integer (n is 1, 2, 4 or 8).
func (r *Reader) uintN(n int) (uint64, error) {
	p, err := r.Next(uint64(n))
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// IsNil consumes a nil if one is next.
func (r *Reader) IsNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// MapLen reads a map header of at most max entries (no bound when max <
// 0). Every entry takes at least two bytes, so a count the rest of the
// message cannot hold is refused too.
func (r *Reader) MapLen(max int) (int, error) {
	return r.containerLen(0x80, 0xde, "a map", "map", max, 2)
}

// ArrayLen reads an array header of at most max elements (no bound when
// max < 0). Every element takes at least one byte, so a count the rest of
// the message cannot hold is refused too.
func (r *Reader) ArrayLen(max int) (int, error) {
	return r.containerLen(0x90, 0xdc, "an array", "array", max, 1)
}

// containerLen reads a map or array header: fix is the fix form's first
// code (its low 4 bits the count), c16 the 16-bit form's (c16+1 the
// 32-bit one's). A count above max (when max >= 0) or more entries of
// minBytes each than the input holds is refused before the caller
// allocates for them; both errors name the header's first byte.
func (r *Reader) containerLen(fix, c16 byte, want, kind string, max int, minBytes uint64) (int, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= fix && c <= fix|0x0f:
		n = uint64(c & 0x0f)
	case c == c16:
		n, err = r.uintN(2)
	case c == c16+1:
		n, err = r.uintN(4)
	default:
		r.off = start
		return 0, r.Errorf("want %s, got %s", want, typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if max >= 0 && n > uint64(max) {
		return 0, r.fail(start, true, "%s of %d entries, limit %d", kind, n, max)
	}
	if n > uint64(r.Left())/minBytes {
		return 0, r.fail(start, false, "%s claims %d entries but only %d bytes follow", kind, n, r.Left())
	}
	return int(n), nil
}

// RawStr reads a msgpack str of at most max bytes (no bound when max < 0;
// checked from the header) that is valid UTF-8, as msgspec demands. Its
// bytes alias the input. A bin is refused: encoders with use_bin_type never
// send text as bin.
func (r *Reader) RawStr(max int) ([]byte, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, err = r.uintN(1)
	case c == 0xda:
		n, err = r.uintN(2)
	case c == 0xdb:
		n, err = r.uintN(4)
	default:
		r.off = start
		return nil, r.Errorf("want a string, got %s", typeName(c))
	}
	if err != nil {
		return nil, err
	}
	if max >= 0 && n > uint64(max) {
		return nil, r.fail(start, true, "string of %d bytes, limit %d", n, max)
	}
	if n > uint64(r.Left()) {
		return nil, r.Errorf("string claims %d bytes but only %d follow", n, r.Left())
	}
	p, _ := r.Next(n)
	if !utf8.Valid(p) {
		return nil, r.ErrorAt(start, "string is not valid UTF-8")
	}
	return p, nil
}

// Str is RawStr into a string of its own.
func (r *Reader) Str(max int) (string, error) {
	p, err := r.RawStr(max)
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// RawBin reads a msgpack bin of at most max bytes (no bound when max < 0;
// checked from the header). Its bytes alias the input.
func (r *Reader) RawBin(max int) ([]byte, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	if c < 0xc4 || c > 0xc6 {
		r.off = start
		return nil, r.Errorf("want binary, got %s", typeName(c))
	}
	n, err := r.uintN(1 << (c - 0xc4))
	if err != nil {
		return nil, err
	}
	if max >= 0 && n > uint64(max) {
		return nil, r.fail(start, true, "binary of %d bytes, limit %d", n, max)
	}
	return r.Next(n)
}

// Bin is RawBin into a copy of its own (nil when empty), so that the value
// outlives the input buffer.
func (r *Reader) Bin(max int) ([]byte, error) {
	p, err := r.RawBin(max)
	if err != nil || len(p) == 0 {
		return nil, err
	}
	return append([]byte(nil), p...), nil
}
