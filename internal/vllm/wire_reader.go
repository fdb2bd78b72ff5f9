package vllm

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// mpReader is a strict msgpack reader over one message. Every length it
// reads is checked against the bytes left before anything is made of it, so
// what a decoder allocates is bounded by its input, not by a header's claim.
type mpReader struct {
	b   []byte
	off int
}

func (r *mpReader) left() int { return len(r.b) - r.off }

func (r *mpReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.off, fmt.Sprintf(format, args...))
}

// errorAt is errorf for the value that starts at byte start.
func (r *mpReader) errorAt(start int, format string, args ...any) error {
	r.off = start
	return r.errorf(format, args...)
}

func (r *mpReader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errorf("message ends early")
	}
	return r.b[r.off], nil
}

func (r *mpReader) code() (byte, error) {
	c, err := r.peek()
	if err == nil {
		r.off++
	}
	return c, err
}

func (r *mpReader) next(n uint64) ([]byte, error) {
	if n > uint64(r.left()) {
		return nil, r.errorf("message ends early: need %d more bytes, have %d", n, r.left())
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

// uintN reads an n-byte big-endian unsigned integer (n is 1, 2, 4 or 8).
func (r *mpReader) uintN(n int) (uint64, error) {
	p, err := r.next(uint64(n))
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

// isNil consumes a nil if one is next.
func (r *mpReader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// end refuses bytes after the message's value, as msgspec's decoder does.
func (r *mpReader) end(what string) error {
	if r.left() != 0 {
		return fmt.Errorf("%w: %s: %d bytes after the value", ErrMalformed, what, r.left())
	}
	return nil
}

// mapLen reads a map header. Every entry takes at least two bytes.
func (r *mpReader) mapLen() (int, error) {
	return r.containerLen(0x80, 0xde, "a map", "map claims", -1, 2)
}

// arrayLen reads an array header of at most max elements (no bound when
// max < 0); every element takes at least one byte.
func (r *mpReader) arrayLen(max int) (int, error) {
	return r.containerLen(0x90, 0xdc, "an array", "array claims", max, 1)
}

// containerLen reads a map or array header: fix is the fix form's first
// code (its low 4 bits the count), c16 the 16-bit form's (c16+1 the
// 32-bit one's). A count above max (when max >= 0) or more entries of
// minBytes each than the input holds is refused before anything is
// allocated for them.
func (r *mpReader) containerLen(fix, c16 byte, want, claims string, max int, minBytes uint64) (int, error) {
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
		r.off--
		return 0, r.errorf("want %s, got %s", want, typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if max >= 0 && n > uint64(max) {
		return 0, r.errorAt(start, "array of %d entries, limit %d", n, max)
	}
	if n > uint64(r.left())/minBytes {
		return 0, r.errorAt(start, "%s %d entries but only %d bytes follow", claims, n, r.left())
	}
	return int(n), nil
}

// rawStr reads a msgpack str of at most max bytes (checked from the
// header) and returns its bytes, which alias the input. msgspec refuses a
// str that is not UTF-8, and so does this.
func (r *mpReader) rawStr(max int) ([]byte, error) {
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
		r.off--
		return nil, r.errorf("want a string, got %s", typeName(c))
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, r.errorAt(start, "string of %d bytes, limit %d", n, max)
	}
	p, err := r.next(n)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(p) {
		return nil, r.errorAt(start, "string is not valid UTF-8")
	}
	return p, nil
}

// str reads a string of at most MaxStringLen bytes.
func (r *mpReader) str() (string, error) {
	p, err := r.rawStr(MaxStringLen)
	return string(p), err
}

// rawBin reads a msgpack bin of at most max bytes; its bytes alias the input.
func (r *mpReader) rawBin(max int) ([]byte, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	if c < 0xc4 || c > 0xc6 {
		r.off--
		return nil, r.errorf("want binary, got %s", typeName(c))
	}
	n, err := r.uintN(1 << (c - 0xc4))
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, r.errorAt(start, "binary of %d bytes, limit %d", n, max)
	}
	return r.next(n)
}

// bin reads a bin of at most max bytes into a copy of its own (nil when
// empty), so that the value outlives the input buffer.
func (r *mpReader) bin(max int) ([]byte, error) {
	p, err := r.rawBin(max)
	if err != nil || len(p) == 0 {
		return nil, err
	}
	return append([]byte(nil), p...), nil
}

// integer reads any msgpack integer. neg reports a negative value, whose
// two's complement is v; otherwise v is the value (up to 2^64-1).
func (r *mpReader) integer() (v uint64, neg bool, err error) {
	c, err := r.code()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	case c >= 0xcc && c <= 0xcf:
		v, err = r.uintN(1 << (c - 0xcc))
		return v, false, err
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		u, err := r.uintN(n)
		if err != nil {
			return 0, false, err
		}
		shift := 64 - 8*n
		s := int64(u<<shift) >> shift
		return uint64(s), s < 0, nil
	}
	r.off--
	return 0, false, r.errorf("want an integer, got %s", typeName(c))
}

// uint reads a non-negative integer of any width, up to 2^64-1.
func (r *mpReader) uint() (uint64, error) {
	start := r.off
	v, neg, err := r.integer()
	if err == nil && neg {
		err = r.errorAt(start, "integer %d is negative", int64(v))
	}
	return v, err
}

// int reads an integer in [min, MaxInt].
func (r *mpReader) int(min int) (int, error) {
	start := r.off
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	switch {
	case neg && int64(v) < int64(min):
		return 0, r.errorAt(start, "integer %d is below %d", int64(v), min)
	case !neg && v > MaxInt:
		return 0, r.errorAt(start, "integer %d is above %d", v, MaxInt)
	case !neg && int64(v) < int64(min):
		return 0, r.errorAt(start, "integer %d is below %d", v, min)
	}
	return int(int64(v)), nil
}

// number reads any msgpack integer or float as a float64.
func (r *mpReader) number() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.off++
		u, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		r.off++
		u, err := r.uintN(8)
		return math.Float64frombits(u), err
	}
	if !(c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3)) {
		return 0, r.errorf("want a number, got %s", typeName(c))
	}
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

// skip consumes one value of any type, refusing nesting deeper than maxDepth.
func (r *mpReader) skip(depth int) error {
	if depth > maxDepth {
		return r.errorf("value nested deeper than %d levels", maxDepth)
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, err := r.arrayLen(-1)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		_, err := r.rawStr(math.MaxInt)
		return err
	}
	r.off++
	var n uint64
	switch c {
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		n, err = r.uintN(1 << (c - 0xc4))
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, then a type byte
		n, err = r.uintN(1 << (c - 0xc7))
		n++
	case 0xca:
		n = 4
	case 0xcb:
		n = 8
	case 0xcc, 0xcd, 0xce, 0xcf:
		n = 1 << (c - 0xcc)
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n = 1 << (c - 0xd0)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1..16, plus the type byte
		n = 1<<(c-0xd4) + 1
	default: // 0xc1 is never used
		r.off--
		return r.errorf("invalid msgpack code 0x%02x", c)
	}
	if err != nil {
		return err
	}
	_, err = r.next(n)
	return err
}

// typeName names the msgpack type that code c starts, for error messages.
func typeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		return fmt.Sprintf("an integer (0x%02x)", c)
	case c <= 0x8f || c == 0xde || c == 0xdf:
		return fmt.Sprintf("a map (0x%02x)", c)
	case c <= 0x9f || c == 0xdc || c == 0xdd:
		return fmt.Sprintf("an array (0x%02x)", c)
	case c <= 0xbf || (c >= 0xd9 && c <= 0xdb):
		return fmt.Sprintf("a string (0x%02x)", c)
	case c == 0xc0:
		return "nil (0xc0)"
	case c == 0xc2 || c == 0xc3:
		return fmt.Sprintf("a bool (0x%02x)", c)
	case c >= 0xc4 && c <= 0xc6:
		return fmt.Sprintf("binary (0x%02x)", c)
	case c == 0xca || c == 0xcb:
		return fmt.Sprintf("a float (0x%02x)", c)
	case c == 0xc1:
		return "the unused code 0xc1"
	}
	return fmt.Sprintf("an extension (0x%02x)", c)
}

// fieldErr prefixes err with the message and field it concerns.
func fieldErr(msg, key string, err error) error {
	return fmt.Errorf("%s field %s: %w", msg, key, err)
}
