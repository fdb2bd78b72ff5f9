package pushwire

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeMap reads the msgpack map that follows a message's prefix, for the
// flat messages of this package (PUSH_FAIL, PUSH_CANCEL): for a key that is
// names[i] it calls field(i) to read the value, skips unknown keys, and
// refuses a key seen twice, trailing bytes and a missing field (every name
// but names[optional]). Errors name msg, the message's kind.
func decodeMap(rd *reader, msg string, names []string, optional []int, field func(i int) error) error {
	n, err := rd.MapLen(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	seen := make([]bool, len(names))
	for range n {
		key, err := rd.str()
		if err != nil {
			return fmt.Errorf("%s: map key: %w", msg, err)
		}
		i := slices.Index(names, key)
		if i < 0 {
			if err := rd.Skip(); err != nil {
				return fmt.Errorf("%s: unknown field %q: %w", msg, key, err)
			}
			continue
		}
		if seen[i] {
			return fmt.Errorf("%w: %s: field %s appears twice", ErrMalformed, msg, key)
		}
		seen[i] = true
		if err := field(i); err != nil {
			return fmt.Errorf("%s: field %s: %w", msg, key, err)
		}
	}
	if rd.Left() != 0 {
		return fmt.Errorf("%w: %s: %d bytes after the map", ErrMalformed, msg, rd.Left())
	}
	for i, name := range names {
		if !slices.Contains(optional, i) && !seen[i] {
			return fmt.Errorf("%w: %s field %s is missing", ErrMalformed, msg, name)
		}
	}
	return nil
}

// rank reads a prefill or decode rank: a non-negative bounded integer.
func rank(rd *reader) (int, error) {
	r, err := boundedInt(rd)
	if err == nil && r < 0 {
		err = rd.Errorf("rank %d is negative", r)
	}
	return r, err
}

// seqField reads an optional registration_seq: nil or a positive integer.
func seqField(rd *reader) (uint64, error) {
	if rd.IsNil() { // consumed: nil counts as absent
		return 0, nil
	}
	v, err := rd.Uint()
	if err == nil && v == 0 {
		err = rd.Errorf("registration_seq 0 is reserved for \"not said\": leave the key out")
	}
	return v, err
}

// encodeSeq writes registration_seq when it is set.
func encodeSeq(enc *msgpack.Encoder, seq uint64) error {
	if seq == 0 {
		return nil
	}
	return errors.Join(enc.EncodeString("registration_seq"), enc.EncodeUint(seq))
}
