package nixl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The native agent's C shim returns lists and maps as one byte buffer
// each (notifications come as an array of entries instead: notifdecode.go), so that every call crosses cgo once and C never hands Go
// a pointer into C++ containers. The encoding (also documented in shim.h) is
// little-endian uint64 integers and byte strings prefixed by their uint64
// length. These functions are pure Go so that they are tested and fuzzed in
// the default build.

// errShimEncoding reports a result buffer that does not follow the encoding:
// a bug in the shim, never a user error.
var errShimEncoding = errors.New("nixl: malformed result from the C shim")

type shimReader struct {
	b []byte
}

func (r *shimReader) u64() (uint64, error) {
	if len(r.b) < 8 {
		return 0, fmt.Errorf("%w: %d bytes left, need 8 for an integer", errShimEncoding, len(r.b))
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v, nil
}

// count reads a count of items that each take at least min bytes, so that a
// corrupt count cannot make the caller allocate more than the buffer holds.
func (r *shimReader) count(min int) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(r.b)/min) {
		return 0, fmt.Errorf("%w: count %d exceeds the %d bytes left", errShimEncoding, n, len(r.b))
	}
	return int(n), nil
}

// bytes returns the next byte string as a sub-slice of the buffer, with its
// capacity cut so that appending to it never overwrites what follows.
func (r *shimReader) bytes() ([]byte, error) {
	n, err := r.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%w: string of %d bytes, only %d left", errShimEncoding, n, len(r.b))
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v, nil
}

func (r *shimReader) params() (map[string]string, error) {
	n, err := r.count(16)
	if err != nil {
		return nil, err
	}
	p := make(map[string]string, n)
	for range n {
		k, err := r.bytes()
		if err != nil {
			return nil, err
		}
		v, err := r.bytes()
		if err != nil {
			return nil, err
		}
		p[string(k)] = string(v)
	}
	return p, nil
}

func (r *shimReader) end() error {
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errShimEncoding, len(r.b))
	}
	return nil
}

// decodeStrings decodes a "strings" buffer (u64 count, count byte strings).
func decodeStrings(b []byte) ([]string, error) {
	r := shimReader{b}
	n, err := r.count(8)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, n)
	for range n {
		s, err := r.bytes()
		if err != nil {
			return nil, err
		}
		out = append(out, string(s))
	}
	return out, r.end()
}

// decodeMemsParams decodes a "mems+params" buffer: supported memory types
// and a parameter map.
func decodeMemsParams(b []byte) ([]MemType, map[string]string, error) {
	r := shimReader{b}
	n, err := r.count(8)
	if err != nil {
		return nil, nil, err
	}
	mems := make([]MemType, 0, n)
	for range n {
		m, err := r.u64()
		if err != nil {
			return nil, nil, err
		}
		mems = append(mems, MemType(m))
	}
	p, err := r.params()
	if err != nil {
		return nil, nil, err
	}
	return mems, p, r.end()
}

// decodeQuery decodes a "query" buffer: one optional parameter map per
// queried descriptor, nil where NIXL had no information.
func decodeQuery(b []byte) ([]map[string]string, error) {
	r := shimReader{b}
	n, err := r.count(8)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, n)
	for i := range n {
		has, err := r.u64()
		if err != nil {
			return nil, err
		}
		switch has {
		case 0:
		case 1:
			if out[i], err = r.params(); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%w: presence flag %d", errShimEncoding, has)
		}
	}
	return out, r.end()
}

// encodeParams encodes a parameter map for the shim, keys sorted so that
// the same map always gives the same bytes.
func encodeParams(p map[string]string) []byte {
	keys := make([]string, 0, len(p))
	size := 8
	for k, v := range p {
		keys = append(keys, k)
		size += 16 + len(k) + len(v)
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(p)))
	for _, k := range keys {
		b = appendShimBytes(b, k)
		b = appendShimBytes(b, p[k])
	}
	return b
}

func appendShimBytes(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
