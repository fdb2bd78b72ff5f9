package sidechannel

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode returns v as msgpack, the encoding of every frame body.
func Encode(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sidechannel: encode %T: %w", v, err)
	}
	return b, nil
}

// Decode reads one msgpack value from body into v. Trailing bytes, unknown
// fields of the wrong type and truncated values are errors matching
// ErrMalformed, and so are shapes the decoder must not see (see checkShape).
func Decode(body []byte, v any) (err error) {
	defer func() {
		// The decoder is not ours; a panic on hostile input must not
		// cross into the caller.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: decoder panicked: %v", ErrMalformed, r)
		}
	}()
	if _, err := checkShape(body); err != nil {
		return err
	}
	r := bytes.NewReader(body)
	dec := msgpack.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %d bytes after the %T value", ErrMalformed, r.Len(), v)
	}
	return nil
}
