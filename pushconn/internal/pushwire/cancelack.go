package pushwire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// CancelAckPrefix starts every cancel acknowledgement. It is not a prefix
// of CancelPrefix's messages, nor they of it ("PUSH_CANCEL:" ends with a
// colon where this one goes on with "_ACK:").
const CancelAckPrefix = "PUSH_CANCEL_ACK:"

// CancelAck is a prefill rank's answer to a PUSH_CANCEL: no WRITE of the
// cancelled registration can land in decode's blocks any more (the
// registration was withdrawn before its WRITE started, its WRITE ended —
// completed, failed or cancelled — or the rank never held it). Decode may
// then hand the request's blocks back as far as this rank is concerned.
type CancelAck struct {
	// RequestID and TransferID are the cancel's (so the registration's);
	// TransferID is empty when it had none.
	RequestID  string
	TransferID string
	// EngineID and Rank name the prefill engine and its global rank that
	// answers; decode identifies the rank by the notification's sender.
	EngineID string
	Rank     int
	// Seq echoes the cancel's registration_seq, when it had one, so decode
	// never takes an answer to an earlier registration of the same id for
	// one to the current.
	Seq uint64
}

// IsCancelAck reports whether msg starts with CancelAckPrefix, without
// decoding it.
func IsCancelAck(msg []byte) bool { return bytes.HasPrefix(msg, []byte(CancelAckPrefix)) }

// AppendCancelAck appends a's notification bytes to dst: CancelAckPrefix,
// then a msgpack map with keys request_id, transfer_id (only when set),
// engine_id and rank, in that order, in their most compact encodings.
func AppendCancelAck(dst []byte, a *CancelAck) ([]byte, error) {
	if a.RequestID == "" {
		return dst, fmt.Errorf("%w: PUSH_CANCEL_ACK field request_id is empty", ErrMalformed)
	}
	if a.Rank < 0 || a.Rank > maxFieldInt {
		return dst, fmt.Errorf("%w: PUSH_CANCEL_ACK field rank %d is out of range", ErrMalformed, a.Rank)
	}
	if err := checkIDs("PUSH_CANCEL_ACK", []string{"request_id", "transfer_id", "engine_id"}, a.RequestID, a.TransferID, a.EngineID); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(append(dst, CancelAckPrefix...))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	n := 3
	if a.TransferID != "" {
		n++
	}
	if a.Seq != 0 {
		n++
	}
	err := errors.Join(enc.EncodeMapLen(n), encodeStr(enc, "request_id", a.RequestID))
	if a.TransferID != "" {
		err = errors.Join(err, encodeStr(enc, "transfer_id", a.TransferID))
	}
	err = errors.Join(err, encodeStr(enc, "engine_id", a.EngineID), encodeInt(enc, "rank", a.Rank), encodeSeq(enc, a.Seq))
	if err != nil {
		return dst, fmt.Errorf("encode PUSH_CANCEL_ACK: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeCancelAck returns a's notification bytes.
func EncodeCancelAck(a *CancelAck) ([]byte, error) { return AppendCancelAck(nil, a) }

// DecodeCancelAck parses a PUSH_CANCEL_ACK notification. request_id,
// engine_id and rank are required, transfer_id optional; unknown keys are
// skipped; ids longer than MaxIDLen are refused (ErrTooLong).
func DecodeCancelAck(msg []byte) (*CancelAck, error) {
	if !IsCancelAck(msg) {
		return nil, fmt.Errorf("%w: PUSH_CANCEL_ACK: message does not start with %q", ErrMalformed, CancelAckPrefix)
	}
	rd := &reader{b: msg, off: len(CancelAckPrefix)}
	var a CancelAck
	err := decodeMap(rd, "PUSH_CANCEL_ACK", []string{"request_id", "transfer_id", "engine_id", "rank", "registration_seq"}, []int{1, 4},
		func(i int) (err error) {
			switch i {
			case 0:
				a.RequestID, err = rd.id()
			case 1:
				a.TransferID, err = rd.id()
			case 2:
				a.EngineID, err = rd.id()
			case 3:
				a.Rank, err = rank(rd)
			case 4:
				a.Seq, err = seqField(rd)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	if a.RequestID == "" {
		return nil, fmt.Errorf("%w: PUSH_CANCEL_ACK field request_id is empty", ErrMalformed)
	}
	return &a, nil
}
