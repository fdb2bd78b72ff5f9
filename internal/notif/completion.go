package notif

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// MaxCount bounds the count of a completion message. It is far above any real
// world size and keeps a hostile count from meaning "never done".
const MaxCount = 1 << 16

// MaxIDLen bounds the length of a request id in any message.
const MaxIDLen = 1024

// ErrMalformed is matched (errors.Is) by every decoding error of this package.
var ErrMalformed = errors.New("notif: malformed notification")

// Completion is a decoded completion message: the transfer for request ID is
// done and N is the number of ranks on the sending engine (its world size).
type Completion struct {
	ID string
	N  int
}

// EncodeCompletion returns "<id>:<n>". It fails when the message could not
// be decoded again: an empty or over-long id, or n outside [1, MaxCount].
func EncodeCompletion(id string, n int) ([]byte, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxCount {
		return nil, fmt.Errorf("notif: completion count %d outside [1, %d]", n, MaxCount)
	}
	b := make([]byte, 0, len(id)+6)
	b = append(b, id...)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(n), 10), nil
}

// DecodeCompletion parses "<id>:<n>". The id may itself contain ':' (the last
// colon separates the count); n is a decimal number in [1, MaxCount] with no
// sign and no leading zero.
func DecodeCompletion(msg []byte) (Completion, error) {
	i := bytes.LastIndexByte(msg, ':')
	if i < 0 {
		return Completion{}, fmt.Errorf("%w: completion %q has no ':' before the count", ErrMalformed, clip(msg))
	}
	id, num := msg[:i], msg[i+1:]
	if len(id) == 0 {
		return Completion{}, fmt.Errorf("%w: completion %q has an empty request id", ErrMalformed, clip(msg))
	}
	if len(id) > MaxIDLen {
		return Completion{}, fmt.Errorf("%w: completion request id is %d bytes, limit %d", ErrMalformed, len(id), MaxIDLen)
	}
	n, err := parseCount(num)
	if err != nil {
		return Completion{}, fmt.Errorf("%w: completion %q: %v", ErrMalformed, clip(msg), err)
	}
	return Completion{ID: string(id), N: n}, nil
}

func parseCount(b []byte) (int, error) {
	n, err := ParseDecimal(b, 6, "count")
	if err != nil {
		return 0, err
	}
	if n < 1 || n > MaxCount {
		return 0, fmt.Errorf("count %d outside [1, %d]", n, MaxCount)
	}
	return n, nil
}

// ParseDecimal reads the numbers of the notification formats: decimal
// digits only, no leading zero, at most maxDigits of them (so the value
// fits an int whatever the peer sent). The error names the number as what
// and the rule that failed.
func ParseDecimal(b []byte, maxDigits int, what string) (int, error) {
	switch {
	case len(b) == 0:
		return 0, fmt.Errorf("empty %s", what)
	case len(b) > 1 && b[0] == '0':
		return 0, fmt.Errorf("%s has a leading zero", what)
	case len(b) > maxDigits:
		return 0, fmt.Errorf("%s longer than %d digits", what, maxDigits)
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%s %q is not a decimal number", what, b)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func checkID(id string) error {
	if id == "" {
		return errors.New("notif: empty request id")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("notif: request id is %d bytes, limit %d", len(id), MaxIDLen)
	}
	return nil
}

// clip keeps error messages short when a peer sends a huge message.
func clip(b []byte) []byte {
	const max = 64
	if len(b) > max {
		return b[:max]
	}
	return b
}
