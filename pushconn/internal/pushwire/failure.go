package pushwire

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// FailPrefix starts every failure notification.
const FailPrefix = "PUSH_FAIL:"

// MaxReasonLen bounds the reason text that AppendFailure writes, so a
// failure notification stays small whatever error caused it.
const MaxReasonLen = 1024

// FailKind says at which step a push failed on the prefill rank.
type FailKind string

// Failure kinds. Decoders accept any kind, so new ones can be added.
const (
	FailHandshake FailKind = "handshake" // could not handshake with the decode engine
	FailLayout    FailKind = "layout"    // block ids or layouts do not map to descriptors
	FailPost      FailKind = "post"      // the WRITE could not be created or posted
	FailTransfer  FailKind = "transfer"  // the WRITE failed in flight
	FailExpired   FailKind = "expired"   // the registration expired before prefill finished
	FailClosed    FailKind = "closed"    // the producer shut down before writing
	// FailOverloaded: the prefill rank holds as many registrations or
	// decode engines as it is configured for and refused this one.
	FailOverloaded FailKind = "overloaded"
	// FailAborted: the prefill engine aborted the request
	// (Producer.Abort) before this registration's WRITE started.
	FailAborted FailKind = "aborted"
)

// Failure is a prefill rank's report that it will not write a registered
// request, so decode fails the request at once instead of at its timeout.
type Failure struct {
	// RequestID is decode's request id, as in the registration.
	RequestID string
	// TransferID is the registration's transfer id, empty when it had none.
	TransferID string
	// EngineID and Rank name the prefill engine and the global rank
	// (pp index * TP size + tp index) that failed.
	EngineID string
	Rank     int
	// Kind is the failed step; Reason says what went wrong, for people.
	Kind   FailKind
	Reason string
	// Seq is the failed registration's registration_seq, when it had one
	// (our own optional key, last), so decode never fails a later
	// registration of the same id for it.
	Seq uint64
}

// IsFailure reports whether msg starts with FailPrefix, without decoding it.
func IsFailure(msg []byte) bool { return bytes.HasPrefix(msg, []byte(FailPrefix)) }

// AppendFailure appends f's notification bytes to dst: FailPrefix, then a
// msgpack map with keys request_id, transfer_id (only when set), engine_id,
// rank, kind and reason, in that order. A reason longer than MaxReasonLen is
// cut on a character boundary.
func AppendFailure(dst []byte, f *Failure) ([]byte, error) {
	if f.RequestID == "" {
		return dst, fmt.Errorf("%w: PUSH_FAIL field request_id is empty", ErrMalformed)
	}
	if f.Rank < 0 || f.Rank > maxFieldInt {
		return dst, fmt.Errorf("%w: PUSH_FAIL field rank %d is out of range", ErrMalformed, f.Rank)
	}
	if err := checkIDs("PUSH_FAIL", []string{"request_id", "transfer_id", "engine_id", "kind"}, f.RequestID, f.TransferID, f.EngineID, string(f.Kind)); err != nil {
		return dst, err
	}
	reason := f.Reason
	if len(reason) > MaxReasonLen {
		cut := MaxReasonLen
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	buf := bytes.NewBuffer(append(dst, FailPrefix...))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	n := 5
	if f.TransferID != "" {
		n++
	}
	if f.Seq != 0 {
		n++
	}
	err := errors.Join(enc.EncodeMapLen(n), encodeStr(enc, "request_id", f.RequestID))
	if f.TransferID != "" {
		err = errors.Join(err, encodeStr(enc, "transfer_id", f.TransferID))
	}
	err = errors.Join(err,
		encodeStr(enc, "engine_id", f.EngineID),
		encodeInt(enc, "rank", f.Rank),
		encodeStr(enc, "kind", string(f.Kind)),
		encodeStr(enc, "reason", reason),
		encodeSeq(enc, f.Seq),
	)
	if err != nil {
		return dst, fmt.Errorf("encode PUSH_FAIL: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeFailure returns f's notification bytes.
func EncodeFailure(f *Failure) ([]byte, error) { return AppendFailure(nil, f) }

// DecodeFailure parses a PUSH_FAIL notification. request_id, engine_id,
// rank, kind and reason are required; unknown keys are skipped.
func DecodeFailure(msg []byte) (*Failure, error) {
	if !IsFailure(msg) {
		return nil, fmt.Errorf("%w: PUSH_FAIL: message does not start with %q", ErrMalformed, FailPrefix)
	}
	rd := newReader(msg, len(FailPrefix))
	var f Failure
	err := decodeMap(rd, "PUSH_FAIL", []string{"request_id", "transfer_id", "engine_id", "rank", "kind", "reason", "registration_seq"}, []int{1, 6},
		func(i int) (err error) {
			switch i {
			case 0:
				f.RequestID, err = rd.id()
			case 1:
				f.TransferID, err = rd.id()
			case 2:
				f.EngineID, err = rd.id()
			case 3:
				f.Rank, err = rank(rd)
			case 4:
				var s string
				s, err = rd.id()
				f.Kind = FailKind(s)
			case 5:
				f.Reason, err = rd.str()
			case 6:
				f.Seq, err = seqField(rd)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	if f.RequestID == "" {
		return nil, fmt.Errorf("%w: PUSH_FAIL field request_id is empty", ErrMalformed)
	}
	return &f, nil
}

// Error returns the failure as text, for the error decode reports.
func (f *Failure) Error() string {
	return fmt.Sprintf("prefill engine %q rank %d could not push request %q (%s): %s",
		f.EngineID, f.Rank, f.RequestID, f.Kind, f.Reason)
}
