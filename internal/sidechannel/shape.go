package sidechannel

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth bounds the nesting of arrays and maps in a frame body.
const MaxDepth = 32

// checkShape walks one msgpack value in body without decoding it and
// refuses shapes that would hurt the decoder: an array, map, string or
// binary whose header claims more elements or bytes than the body holds
// (msgpack/v5 preallocates slices from the header before reading them, so
// a 9-byte frame could otherwise ask for gigabytes and kill the process),
// nesting deeper than MaxDepth (the decoder recurses), and the reserved
// byte 0xc1. It returns the number of bytes the value takes.
func checkShape(body []byte) (int, error) {
	pending := make([]uint64, 1, 8)
	pending[0] = 1
	i := 0
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if i >= len(body) {
			return i, fmt.Errorf("%w: truncated msgpack value at byte %d", ErrMalformed, i)
		}
		c := body[i]
		i++
		var skip, children uint64
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, i, err = length(body, i, 1)
		case c == 0xc5 || c == 0xda: // bin16, str16
			skip, i, err = length(body, i, 2)
		case c == 0xc6 || c == 0xdb: // bin32, str32
			skip, i, err = length(body, i, 4)
		case c == 0xc7: // ext8: length then type
			skip, i, err = length(body, i, 1)
			skip++
		case c == 0xc8:
			skip, i, err = length(body, i, 2)
			skip++
		case c == 0xc9:
			skip, i, err = length(body, i, 4)
			skip++
		case c == 0xca || c == 0xce || c == 0xd2:
			skip = 4
		case c == 0xcb || c == 0xcf || c == 0xd3:
			skip = 8
		case c == 0xcc || c == 0xd0:
			skip = 1
		case c == 0xcd || c == 0xd1:
			skip = 2
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16 plus the type byte
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			children, i, err = length(body, i, 2)
		case c == 0xdd:
			children, i, err = length(body, i, 4)
		case c == 0xde:
			children, i, err = length(body, i, 2)
			children *= 2
		case c == 0xdf:
			children, i, err = length(body, i, 4)
			children *= 2
		default: // 0xc1 is never used
			return i, fmt.Errorf("%w: reserved msgpack byte 0x%02x at byte %d", ErrMalformed, c, i-1)
		}
		if err != nil {
			return i, err
		}
		left := uint64(len(body) - i)
		if skip > left {
			return i, fmt.Errorf("%w: msgpack value at byte %d claims %d bytes, %d left", ErrMalformed, i, skip, left)
		}
		i += int(skip)
		if children > 0 {
			// Every element takes at least one byte.
			if children > uint64(len(body)-i) {
				return i, fmt.Errorf("%w: msgpack container at byte %d claims %d elements, %d bytes left", ErrMalformed, i, children, len(body)-i)
			}
			if len(pending) > MaxDepth {
				return i, fmt.Errorf("%w: msgpack nesting deeper than %d", ErrMalformed, MaxDepth)
			}
			pending = append(pending, children)
		}
	}
	return i, nil
}

// length reads an n-byte big-endian length at body[i:].
func length(body []byte, i, n int) (uint64, int, error) {
	if len(body)-i < n {
		return 0, i, fmt.Errorf("%w: truncated msgpack length at byte %d", ErrMalformed, i)
	}
	switch n {
	case 1:
		return uint64(body[i]), i + 1, nil
	case 2:
		return uint64(binary.BigEndian.Uint16(body[i:])), i + 2, nil
	default:
		return uint64(binary.BigEndian.Uint32(body[i:])), i + 4, nil
	}
}
