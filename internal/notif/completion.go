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
	// Seq is the registration_seq of the push registration the transfer
	// answers, from the optional "#<seq>" tail (DecodeSeqCompletion); 0
	// when the message has none.
	Seq uint64
}

// SeqMark separates a push completion's count from the registration_seq
// it names: "<id>:<n>#<seq>". It is neither a digit, whitespace nor '_', so
// a decoder that splits at the last ':' and reads the rest as an integer
// (vLLM's, with Python's int()) refuses the message instead of counting it
// for some request; and it comes after the last ':', so the id keeps every
// byte it may hold, ':' and '#' included.
const SeqMark = '#'

// maxSeqDigits is the length of the largest seq, 2^64-1, in decimal.
const maxSeqDigits = 20

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

// EncodeSeqCompletion returns "<id>:<n>#<seq>", the push completion of the
// registration numbered seq, or EncodeCompletion's "<id>:<n>" when seq is 0
// (the registration had no registration_seq: a vLLM decode parses only the
// plain form).
func EncodeSeqCompletion(id string, n int, seq uint64) ([]byte, error) {
	b, err := EncodeCompletion(id, n)
	if err != nil || seq == 0 {
		return b, err
	}
	b = append(b, SeqMark)
	return strconv.AppendUint(b, seq, 10), nil
}

// DecodeCompletion parses "<id>:<n>". The id may itself contain ':' (the last
// colon separates the count); n is a decimal number in [1, MaxCount] with no
// sign and no leading zero. A "#<seq>" tail is malformed here (the plain
// form vLLM's connectors send and read).
func DecodeCompletion(msg []byte) (Completion, error) { return decodeCompletion(msg, false) }

// DecodeSeqCompletion parses a completion that may name what it answers (a
// push registration's seq, a pull hold's key): "<id>:<n>" as
// DecodeCompletion does, optionally followed by "#<seq>", a decimal number
// in [1, 2^64-1] with no sign and no leading zero. Everything after the
// last ':' is the count and the seq, so an id may hold ':' and '#'.
func DecodeSeqCompletion(msg []byte) (Completion, error) { return decodeCompletion(msg, true) }

func decodeCompletion(msg []byte, withSeq bool) (Completion, error) {
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
	var seq uint64
	if j := bytes.IndexByte(num, SeqMark); withSeq && j >= 0 {
		var err error
		if seq, err = parseSeq(num[j+1:]); err != nil {
			return Completion{}, fmt.Errorf("%w: completion %q: %v", ErrMalformed, clip(msg), err)
		}
		num = num[:j]
	}
	n, err := parseCount(num)
	if err != nil {
		return Completion{}, fmt.Errorf("%w: completion %q: %v", ErrMalformed, clip(msg), err)
	}
	return Completion{ID: string(id), N: n, Seq: seq}, nil
}

// parseSeq reads a registration_seq: decimal, no leading zero, 1..2^64-1.
func parseSeq(b []byte) (uint64, error) {
	switch {
	case len(b) == 0:
		return 0, errors.New("empty registration seq")
	case b[0] == '0':
		return 0, errors.New("registration seq is 0 or has a leading zero")
	case len(b) > maxSeqDigits:
		return 0, fmt.Errorf("registration seq longer than %d digits", maxSeqDigits)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("registration seq %q is not a decimal number", b)
		}
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("registration seq %s is above 2^64-1", b)
	}
	return v, nil
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
