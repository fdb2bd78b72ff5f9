package pushwire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// idMessage is the shape PUSH_CANCEL and PUSH_CANCEL_ACK share: the
// registration's ids, the sender's engine and rank, and its seq. Cancel and
// CancelAck have exactly these fields, so they convert to it.
type idMessage struct {
	RequestID  string
	TransferID string
	EngineID   string
	Rank       int
	Seq        uint64
}

// appendIDMessage appends prefix, then a msgpack map with keys request_id,
// transfer_id (only when set), engine_id, rank and registration_seq (only
// when set), in that order, in their most compact encodings. name is the
// message's name in errors.
func appendIDMessage(dst []byte, prefix, name string, m *idMessage) ([]byte, error) {
	if m.RequestID == "" {
		return dst, fmt.Errorf("%w: %s field request_id is empty", ErrMalformed, name)
	}
	if m.Rank < 0 || m.Rank > maxFieldInt {
		return dst, fmt.Errorf("%w: %s field rank %d is out of range", ErrMalformed, name, m.Rank)
	}
	if err := checkIDs(name, []string{"request_id", "transfer_id", "engine_id"}, m.RequestID, m.TransferID, m.EngineID); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(append(dst, prefix...))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	n := 3
	if m.TransferID != "" {
		n++
	}
	if m.Seq != 0 {
		n++
	}
	err := errors.Join(enc.EncodeMapLen(n), encodeStr(enc, "request_id", m.RequestID))
	if m.TransferID != "" {
		err = errors.Join(err, encodeStr(enc, "transfer_id", m.TransferID))
	}
	err = errors.Join(err, encodeStr(enc, "engine_id", m.EngineID), encodeInt(enc, "rank", m.Rank), encodeSeq(enc, m.Seq))
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// decodeIDMessage parses what appendIDMessage writes: request_id, engine_id
// and rank required, transfer_id and registration_seq optional, unknown
// keys skipped, ids longer than MaxIDLen refused (ErrTooLong).
func decodeIDMessage(msg []byte, prefix, name string) (idMessage, error) {
	var m idMessage
	if !bytes.HasPrefix(msg, []byte(prefix)) {
		return m, fmt.Errorf("%w: %s: message does not start with %q", ErrMalformed, name, prefix)
	}
	rd := newReader(msg, len(prefix))
	err := decodeMap(rd, name, []string{"request_id", "transfer_id", "engine_id", "rank", "registration_seq"}, []int{1, 4},
		func(i int) (err error) {
			switch i {
			case 0:
				m.RequestID, err = rd.id()
			case 1:
				m.TransferID, err = rd.id()
			case 2:
				m.EngineID, err = rd.id()
			case 3:
				m.Rank, err = rank(rd)
			case 4:
				m.Seq, err = seqField(rd)
			}
			return err
		})
	if err != nil {
		return m, err
	}
	if m.RequestID == "" {
		return m, fmt.Errorf("%w: %s field request_id is empty", ErrMalformed, name)
	}
	return m, nil
}
