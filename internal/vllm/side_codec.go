package vllm

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// sideGetMetaMsg is element 0 of a side-channel request: vLLM's GET_META_MSG,
// sent as msgpack bin (msgspec encodes Python bytes as bin).
const sideGetMetaMsg = "get_meta_msg"

// sideEncodeMetaRequest encodes the one-frame request a vLLM handshake
// initiator sends: the msgpack array [bin "get_meta_msg", pp, tp], the
// integers in their smallest form, as msgspec writes them (pp 0, tp 3:
// 93 c4 0c "get_meta_msg" 00 03).
func sideEncodeMetaRequest(pp, tp int) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	// Writes to a bytes.Buffer do not fail.
	_ = enc.EncodeArrayLen(3)
	_ = enc.EncodeBytes([]byte(sideGetMetaMsg))
	_ = enc.EncodeInt(int64(pp))
	_ = enc.EncodeInt(int64(tp))
	return buf.Bytes()
}

// sideDecodeMetaRequest decodes a request frame strictly: exactly a 3-element
// array of "get_meta_msg" (bin, or str as vLLM's listener also answers it)
// and two non-negative msgpack integers, with nothing after it. Anything
// else is an error: nil, floats, bools, negative ranks, other kinds of
// element 0 and trailing bytes.
func sideDecodeMetaRequest(b []byte) (pp, tp int, err error) {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	c, err := dec.PeekCode()
	if err != nil {
		return 0, 0, errors.New("empty request")
	}
	if !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		return 0, 0, fmt.Errorf("request is not a msgpack array (first byte %#02x)", c)
	}
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return 0, 0, fmt.Errorf("request array header: %w", err)
	}
	if n != 3 {
		return 0, 0, fmt.Errorf("request array has %d elements, want 3 (get_meta_msg, pp, tp)", n)
	}
	c, err = dec.PeekCode()
	if err != nil {
		return 0, 0, errors.New("request truncated before element 0")
	}
	if !msgpcode.IsBin(c) && !msgpcode.IsString(c) {
		return 0, 0, fmt.Errorf("request element 0 is not bin or str (code %#02x)", c)
	}
	l, err := dec.DecodeBytesLen()
	if err != nil {
		return 0, 0, fmt.Errorf("request element 0: %w", err)
	}
	if l != len(sideGetMetaMsg) {
		return 0, 0, fmt.Errorf("request element 0 has %d bytes, want %q", l, sideGetMetaMsg)
	}
	var name [len(sideGetMetaMsg)]byte
	if err := dec.ReadFull(name[:]); err != nil {
		return 0, 0, errors.New("request element 0 truncated")
	}
	if string(name[:]) != sideGetMetaMsg {
		return 0, 0, fmt.Errorf("request element 0 is %q, want %q", name[:], sideGetMetaMsg)
	}
	if pp, err = sideDecodeRank(dec, "pp"); err != nil {
		return 0, 0, err
	}
	if tp, err = sideDecodeRank(dec, "tp"); err != nil {
		return 0, 0, err
	}
	if r.Len() != 0 {
		return 0, 0, fmt.Errorf("%d bytes after the request array", r.Len())
	}
	return pp, tp, nil
}

// sideDecodeRank decodes one non-negative msgpack integer.
func sideDecodeRank(dec *msgpack.Decoder, what string) (int, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return 0, fmt.Errorf("request truncated before %s", what)
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh:
	case c == msgpcode.Uint8, c == msgpcode.Uint16, c == msgpcode.Uint32, c == msgpcode.Uint64:
		u, err := dec.DecodeUint64()
		if err != nil {
			return 0, fmt.Errorf("request %s truncated", what)
		}
		if u > math.MaxInt32 {
			return 0, fmt.Errorf("request %s %d out of range", what, u)
		}
		return int(u), nil
	case msgpcode.IsFixedNum(c), c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
	default:
		return 0, fmt.Errorf("request %s is not a msgpack integer (code %#02x)", what, c)
	}
	v, err := dec.DecodeInt64()
	if err != nil {
		return 0, fmt.Errorf("request %s truncated", what)
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("request %s %d out of range", what, v)
	}
	return int(v), nil
}

// sideEncodeTimestamp encodes a listener's clock reading as vLLM's listener
// sends it: msgspec encodes a Python float as float64 (cb + 8 bytes, big
// endian).
func sideEncodeTimestamp(ts float64) []byte {
	b := make([]byte, 9)
	b[0] = msgpcode.Double
	bits := math.Float64bits(ts)
	for i := 0; i < 8; i++ {
		b[1+i] = byte(bits >> (56 - 8*i))
	}
	return b
}

// sideDecodeTimestamp decodes a timestamp frame as vLLM's initiator does,
// without a schema: any msgpack number (float64, float32 or integer), and
// nothing after it.
func sideDecodeTimestamp(b []byte) (float64, error) {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	c, err := dec.PeekCode()
	if err != nil {
		return 0, errors.New("empty timestamp frame")
	}
	switch {
	case c == msgpcode.Double || c == msgpcode.Float:
	case msgpcode.IsFixedNum(c):
	case c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		u, err := dec.DecodeUint64()
		if err != nil {
			return 0, errors.New("timestamp truncated")
		}
		if r.Len() != 0 {
			return 0, fmt.Errorf("%d bytes after the timestamp", r.Len())
		}
		return float64(u), nil
	case c >= msgpcode.Int8 && c <= msgpcode.Int64:
	default:
		return 0, fmt.Errorf("timestamp is not a msgpack number (code %#02x)", c)
	}
	v, err := dec.DecodeFloat64()
	if err != nil {
		return 0, errors.New("timestamp truncated")
	}
	if r.Len() != 0 {
		return 0, fmt.Errorf("%d bytes after the timestamp", r.Len())
	}
	return v, nil
}
