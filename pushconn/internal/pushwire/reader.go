package pushwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/gonixl/gonixl/internal/notif"
)

// ErrMalformed is wrapped by every decoding error: the bytes are not a valid
// message of the kind asked for.
var ErrMalformed = errors.New("malformed notification")

// ErrTooLong is wrapped, with ErrMalformed, by the error for an id or host
// longer than MaxIDLen, so a receiver can count such refusals apart.
var ErrTooLong = errors.New("field too long")

// MaxIDLen bounds every id and host name in a push message (request,
// transfer and engine ids, hosts): notif.MaxIDLen, the bound on request ids
// in completions. Decoders refuse longer ones before keeping them, so a peer
// cannot make a rank hold more than this per field.
const MaxIDLen = notif.MaxIDLen

// maxDepth bounds the nesting of values that a decoder skips (unknown
// fields), so that a message of nested one-element arrays cannot exhaust the
// stack.
const maxDepth = 32

// reader is a strict msgpack reader over one message. It never allocates
// more than the bytes it has seen: every length is checked against what is
// left before anything is made.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.off, fmt.Sprintf(format, args...))
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errorf("message ends early")
	}
	return r.b[r.off], nil
}

func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, r.errorf("message ends early: need %d more bytes, have %d", n, r.left())
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *reader) code() (byte, error) {
	c, err := r.peek()
	if err == nil {
		r.off++
	}
	return c, err
}

// uintN reads an n-byte big-endian unsigned integer (n is 1, 2, 4 or 8).
func (r *reader) uintN(n int) (uint64, error) {
	p, err := r.next(n)
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
	default:
		return binary.BigEndian.Uint64(p), nil
	}
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// mapLen reads a map header. Every entry takes at least two bytes, so a
// count the rest of the message cannot hold is refused before any use.
func (r *reader) mapLen() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n, err = r.uintN(2)
	case c == 0xdf:
		n, err = r.uintN(4)
	default:
		return 0, r.errorf("want a map, got %s", typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left())/2 {
		return 0, r.errorf("map claims %d entries but only %d bytes follow", n, r.left())
	}
	return int(n), nil
}

// arrayLen reads an array header; every element takes at least one byte.
func (r *reader) arrayLen() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, err = r.uintN(2)
	case c == 0xdd:
		n, err = r.uintN(4)
	default:
		return 0, r.errorf("want an array, got %s", typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left()) {
		return 0, r.errorf("array claims %d elements but only %d bytes follow", n, r.left())
	}
	return int(n), nil
}

// str reads a UTF-8 string (msgpack str family; bin is refused, as
// use_bin_type encoders never send text as bin).
func (r *reader) str() (string, error) { return r.strMax(-1) }

// strMax is str refusing, from the header alone, a string longer than max
// bytes (no bound when max < 0).
func (r *reader) strMax(max int) (string, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return "", err
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
		return "", r.errorf("want a string, got %s", typeName(c))
	}
	if err != nil {
		return "", err
	}
	if max >= 0 && n > uint64(max) {
		return "", fmt.Errorf("%w: %w: at byte %d: string of %d bytes, limit %d", ErrMalformed, ErrTooLong, start, n, max)
	}
	if n > uint64(r.left()) {
		return "", r.errorf("string claims %d bytes but only %d follow", n, r.left())
	}
	p, _ := r.next(int(n))
	if !utf8.Valid(p) {
		return "", r.errorf("string is not valid UTF-8")
	}
	return string(p), nil
}

// id reads a string of at most MaxIDLen bytes: the length is checked from
// the header, before the string is made.
func (r *reader) id() (string, error) { return r.strMax(MaxIDLen) }

// checkIDs returns an error naming the first field (names[i] for vals[i])
// longer than MaxIDLen, for encoders.
func checkIDs(msg string, names []string, vals ...string) error {
	for i, v := range vals {
		if len(v) > MaxIDLen {
			return fmt.Errorf("%w: %w: %s field %s is %d bytes, limit %d", ErrMalformed, ErrTooLong, msg, names[i], len(v), MaxIDLen)
		}
	}
	return nil
}

// int reads any msgpack integer that fits an int64.
func (r *reader) int() (int64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := r.uintN(1 << (c - 0xcc))
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			return 0, r.errorf("integer %d is too large", u)
		}
		return int64(u), nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (c - 0xd0)
		u, err := r.uintN(n)
		if err != nil {
			return 0, err
		}
		shift := 64 - 8*n
		return int64(u<<shift) >> shift, nil
	}
	return 0, r.errorf("want an integer, got %s", typeName(c))
}

// uint reads a non-negative integer of any msgpack width, up to 2^64-1.
func (r *reader) uint() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c == 0xcf {
		r.off++
		return r.uintN(8)
	}
	v, err := r.int()
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, r.errorf("integer %d is negative", v)
	}
	return uint64(v), nil
}

// skip consumes one value of any type, refusing nesting deeper than maxDepth.
func (r *reader) skip(depth int) error {
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
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb:
		_, err := r.str()
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
	if n > uint64(r.left()) {
		return r.errorf("value claims %d bytes but only %d follow", n, r.left())
	}
	r.off += int(n)
	return nil
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
