package pushwire

import (
	"bytes"
)

// CancelPrefix starts every cancel notification.
const CancelPrefix = "PUSH_CANCEL:"

// Cancel is a decode rank's word that it ended a registered request other
// than by success (its registration timeout, a PUSH_FAIL from another
// prefill rank, a registration it could not send to every rank, or its
// Consumer closing), so prefill ranks still holding the registration drop
// it instead of later WRITEing into blocks decode has reused.
type Cancel struct {
	// RequestID and TransferID are the registration's, as sent in
	// PUSH_REG; TransferID is empty when it had none.
	RequestID  string
	TransferID string
	// EngineID and Rank name the decode engine and its TP rank that
	// cancels, for logs; prefill identifies the registration by the
	// notification's sender agent and the ids.
	EngineID string
	Rank     int
	// Seq is the registration's registration_seq, when it had one (our own
	// optional key, last): prefill then cancels only that registration, and
	// echoes it in its PUSH_CANCEL_ACK.
	Seq uint64
}

// IsCancel reports whether msg starts with CancelPrefix, without decoding it.
func IsCancel(msg []byte) bool { return bytes.HasPrefix(msg, []byte(CancelPrefix)) }

// AppendCancel appends c's notification bytes to dst: CancelPrefix, then a
// msgpack map with keys request_id, transfer_id (only when set), engine_id
// and rank, in that order, in their most compact encodings.
func AppendCancel(dst []byte, c *Cancel) ([]byte, error) {
	return appendIDMessage(dst, CancelPrefix, "PUSH_CANCEL", (*idMessage)(c))
}

// EncodeCancel returns c's notification bytes.
func EncodeCancel(c *Cancel) ([]byte, error) { return AppendCancel(nil, c) }

// DecodeCancel parses a PUSH_CANCEL notification. request_id, engine_id and
// rank are required; unknown keys are skipped so later versions may add
// some.
func DecodeCancel(msg []byte) (*Cancel, error) {
	m, err := decodeIDMessage(msg, CancelPrefix, "PUSH_CANCEL")
	if err != nil {
		return nil, err
	}
	return (*Cancel)(&m), nil
}
