package loopback

import (
	"encoding/binary"
	"fmt"
)

// maxMDDepth bounds the nesting of arrays and maps in a metadata blob; real
// blobs nest three deep (blob, region list, region).
const maxMDDepth = 16

// checkShape walks the msgpack value that must fill b, without decoding it,
// and refuses what would make the decoder allocate more than b holds: a
// string, binary or extension whose header claims more bytes than are left,
// an array or map that claims more elements than bytes are left (each takes
// at least one), nesting deeper than maxMDDepth, the reserved byte 0xc1, and
// bytes after the value. msgpack/v5 sizes its buffers from such headers
// before it reads the bytes, and its pooled decoders keep the buffers they
// grew: unchecked, every refused 9-byte blob that claimed 4 GiB grew a
// pooled buffer by a MiB or more, and kept it.
func checkShape(b []byte) error {
	pending := make([]uint64, 1, maxMDDepth+1)
	pending[0] = 1
	i := 0
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if i >= len(b) {
			return fmt.Errorf("msgpack value truncated at byte %d", i)
		}
		c := b[i]
		i++
		var skip, children uint64
		ok := true
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c <= 0x8f: // fixmap
			children = 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			children = uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		case c == 0xc1:
			return fmt.Errorf("reserved msgpack byte 0xc1 at byte %d", i-1)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, i, ok = readLen(b, i, 1)
		case c == 0xc5 || c == 0xda: // bin16, str16
			skip, i, ok = readLen(b, i, 2)
		case c == 0xc6 || c == 0xdb: // bin32, str32
			skip, i, ok = readLen(b, i, 4)
		case c >= 0xc7 && c <= 0xc9: // ext8, ext16, ext32: length, then type
			skip, i, ok = readLen(b, i, 1<<(c-0xc7))
			skip++
		case c == 0xca || c == 0xce || c == 0xd2:
			skip = 4
		case c == 0xcb || c == 0xcf || c == 0xd3:
			skip = 8
		case c == 0xcc || c == 0xd0:
			skip = 1
		case c == 0xcd || c == 0xd1:
			skip = 2
		case c <= 0xd8: // fixext 1, 2, 4, 8, 16 plus the type byte
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd: // array16, array32
			children, i, ok = readLen(b, i, 2<<(c-0xdc))
		default: // 0xde, 0xdf: map16, map32
			children, i, ok = readLen(b, i, 2<<(c-0xde))
			children *= 2
		}
		if !ok {
			return fmt.Errorf("msgpack length truncated at byte %d", i)
		}
		left := uint64(len(b) - i)
		if skip > left {
			return fmt.Errorf("msgpack value at byte %d claims %d bytes, %d left", i, skip, left)
		}
		i += int(skip)
		if children > 0 {
			if children > uint64(len(b)-i) {
				return fmt.Errorf("msgpack container at byte %d claims %d elements, %d bytes left", i, children, len(b)-i)
			}
			if len(pending) > maxMDDepth {
				return fmt.Errorf("msgpack nesting deeper than %d", maxMDDepth)
			}
			pending = append(pending, children)
		}
	}
	if i != len(b) {
		return fmt.Errorf("%d bytes after the msgpack value", len(b)-i)
	}
	return nil
}

// readLen reads an n-byte big-endian length at b[i:].
func readLen(b []byte, i, n int) (uint64, int, bool) {
	if len(b)-i < n {
		return 0, i, false
	}
	switch n {
	case 1:
		return uint64(b[i]), i + 1, true
	case 2:
		return uint64(binary.BigEndian.Uint16(b[i:])), i + 2, true
	default:
		return uint64(binary.BigEndian.Uint32(b[i:])), i + 4, true
	}
}
