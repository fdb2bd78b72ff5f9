package pushwire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
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
	if c.RequestID == "" {
		return dst, fmt.Errorf("%w: PUSH_CANCEL field request_id is empty", ErrMalformed)
	}
	if c.Rank < 0 || c.Rank > maxFieldInt {
		return dst, fmt.Errorf("%w: PUSH_CANCEL field rank %d is out of range", ErrMalformed, c.Rank)
	}
	if err := checkIDs("PUSH_CANCEL", []string{"request_id", "transfer_id", "engine_id"}, c.RequestID, c.TransferID, c.EngineID); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(append(dst, CancelPrefix...))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	n := 3
	if c.TransferID != "" {
		n++
	}
	if c.Seq != 0 {
		n++
	}
	err := errors.Join(enc.EncodeMapLen(n), encodeStr(enc, "request_id", c.RequestID))
	if c.TransferID != "" {
		err = errors.Join(err, encodeStr(enc, "transfer_id", c.TransferID))
	}
	err = errors.Join(err, encodeStr(enc, "engine_id", c.EngineID), encodeInt(enc, "rank", c.Rank), encodeSeq(enc, c.Seq))
	if err != nil {
		return dst, fmt.Errorf("encode PUSH_CANCEL: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeCancel returns c's notification bytes.
func EncodeCancel(c *Cancel) ([]byte, error) { return AppendCancel(nil, c) }

// DecodeCancel parses a PUSH_CANCEL notification. request_id, engine_id and
// rank are required; unknown keys are skipped so later versions may add
// some.
func DecodeCancel(msg []byte) (*Cancel, error) {
	if !IsCancel(msg) {
		return nil, fmt.Errorf("%w: PUSH_CANCEL: message does not start with %q", ErrMalformed, CancelPrefix)
	}
	rd := &reader{b: msg, off: len(CancelPrefix)}
	var c Cancel
	err := decodeMap(rd, "PUSH_CANCEL", []string{"request_id", "transfer_id", "engine_id", "rank", "registration_seq"}, []int{1, 4},
		func(i int) (err error) {
			switch i {
			case 0:
				c.RequestID, err = rd.id()
			case 1:
				c.TransferID, err = rd.id()
			case 2:
				c.EngineID, err = rd.id()
			case 3:
				c.Rank, err = rank(rd)
			case 4:
				c.Seq, err = seqField(rd)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	if c.RequestID == "" {
		return nil, fmt.Errorf("%w: PUSH_CANCEL field request_id is empty", ErrMalformed)
	}
	return &c, nil
}
