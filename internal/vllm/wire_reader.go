package vllm

import (
	"fmt"

	"github.com/gonixl/gonixl/internal/msgpackread"
)

// mpReader is the shared strict msgpack reader (every length checked
// against the bytes left before anything is made of it) with this
// package's bounds: its errors wrap ErrMalformed.
type mpReader struct{ msgpackread.Reader }

func newReader(b []byte) *mpReader { return &mpReader{msgpackread.New(b, 0, malformed)} }

// malformed makes a reader's error wrap ErrMalformed:
// "vllm: malformed message: at byte N: ...".
func malformed(e *msgpackread.Error) error { return fmt.Errorf("%w: %w", ErrMalformed, e) }

// str reads a string of at most MaxStringLen bytes.
func (r *mpReader) str() (string, error) { return r.Str(MaxStringLen) }

// int reads an integer in [min, MaxInt].
func (r *mpReader) int(min int) (int, error) { return r.Int(min, MaxInt) }

// end refuses bytes after the message's value, as msgspec's decoder does.
func (r *mpReader) end(what string) error {
	if r.Left() != 0 {
		return fmt.Errorf("%w: %s: %d bytes after the value", ErrMalformed, what, r.Left())
	}
	return nil
}

// fieldErr prefixes err with the message and field it concerns.
func fieldErr(msg, key string, err error) error {
	return fmt.Errorf("%s field %s: %w", msg, key, err)
}
