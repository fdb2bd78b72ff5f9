package msgpackread

// MaxDepth bounds the nesting of a value that Skip consumes, so that a
// message of nested one-element arrays cannot exhaust the stack.
const MaxDepth = 32

// Skip consumes one value of any type (an unknown key's value), refusing
// one nested deeper than MaxDepth levels. It allocates nothing.
func (r *Reader) Skip() error { return r.skip(1) }

func (r *Reader) skip(depth int) error {
	if depth > MaxDepth {
		return r.Errorf("value nested deeper than %d levels", MaxDepth)
	}
	c, err := r.Peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, err := r.MapLen(-1)
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, err := r.ArrayLen(-1)
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		_, err := r.RawStr(-1)
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
		return r.Errorf("invalid msgpack code 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if n > uint64(r.Left()) {
		return r.Errorf("value claims %d bytes but only %d follow", n, r.Left())
	}
	r.off += int(n)
	return nil
}
