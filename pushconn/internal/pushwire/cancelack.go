package pushwire

import (
	"bytes"
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
	return appendIDMessage(dst, CancelAckPrefix, "PUSH_CANCEL_ACK", (*idMessage)(a))
}

// EncodeCancelAck returns a's notification bytes.
func EncodeCancelAck(a *CancelAck) ([]byte, error) { return AppendCancelAck(nil, a) }

// DecodeCancelAck parses a PUSH_CANCEL_ACK notification. request_id,
// engine_id and rank are required, transfer_id optional; unknown keys are
// skipped; ids longer than MaxIDLen are refused (ErrTooLong).
func DecodeCancelAck(msg []byte) (*CancelAck, error) {
	m, err := decodeIDMessage(msg, CancelAckPrefix, "PUSH_CANCEL_ACK")
	if err != nil {
		return nil, err
	}
	return (*CancelAck)(&m), nil
}
