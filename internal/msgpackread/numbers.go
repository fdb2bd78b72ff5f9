package msgpackread

import "math"

// integer reads any msgpack integer. neg reports a negative value, whose
// two's complement is v; otherwise v is the value (up to 2^64-1).
func (r *Reader) integer() (v uint64, neg bool, err error) {
	start := r.off
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
	r.off = start
	return 0, false, r.Errorf("want an integer, got %s", typeName(c))
}

// Uint reads a non-negative integer of any width, up to 2^64-1.
func (r *Reader) Uint() (uint64, error) {
	start := r.off
	v, neg, err := r.integer()
	if err == nil && neg {
		return 0, r.ErrorAt(start, "integer %d is negative", int64(v))
	}
	return v, err
}

// Int64 reads an integer of any width that fits an int64.
func (r *Reader) Int64() (int64, error) {
	start := r.off
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if !neg && v > math.MaxInt64 {
		return 0, r.ErrorAt(start, "integer %d is too large", v)
	}
	return int64(v), nil
}

// Int reads an integer in [lo, hi].
func (r *Reader) Int(lo, hi int) (int, error) {
	start := r.off
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	s := int64(v)
	switch {
	case neg && s < int64(lo):
		return 0, r.ErrorAt(start, "integer %d is below %d", s, lo)
	case neg && s > int64(hi):
		return 0, r.ErrorAt(start, "integer %d is above %d", s, hi)
	case !neg && (v > math.MaxInt64 || s > int64(hi)):
		return 0, r.ErrorAt(start, "integer %d is above %d", v, hi)
	case !neg && s < int64(lo):
		return 0, r.ErrorAt(start, "integer %d is below %d", v, lo)
	}
	return int(s), nil
}

// Number reads any msgpack integer or float as a float64.
func (r *Reader) Number() (float64, error) {
	c, err := r.Peek()
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
		return 0, r.Errorf("want a number, got %s", typeName(c))
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
