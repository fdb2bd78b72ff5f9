package pushwire

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/internal/msgpackread"
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

// reader is the shared strict msgpack reader (it never allocates more than
// the bytes it has seen) with this package's bounds: its errors wrap
// ErrMalformed, and ErrTooLong too for a string over its limit.
type reader struct{ msgpackread.Reader }

// newReader reads msg from byte off, after its prefix; error offsets count
// the prefix.
func newReader(msg []byte, off int) *reader {
	return &reader{msgpackread.New(msg, off, malformed)}
}

func malformed(e *msgpackread.Error) error {
	if e.OverLimit {
		return fmt.Errorf("%w: %w: %w", ErrMalformed, ErrTooLong, e)
	}
	return fmt.Errorf("%w: %w", ErrMalformed, e)
}

// str reads a UTF-8 string of any length the message holds.
func (r *reader) str() (string, error) { return r.Str(-1) }

// id reads a string of at most MaxIDLen bytes: the length is checked from
// the header, before the string is made.
func (r *reader) id() (string, error) { return r.Str(MaxIDLen) }

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
