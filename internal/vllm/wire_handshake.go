package vllm

import (
	"errors"
	"fmt"
	"math"
)

// HandshakePayload is vLLM's NixlHandshakePayload: what the side channel's
// listener answers for one (pp rank, tp rank). The agent metadata travels
// as opaque bytes so that the receiver can check the compatibility hash
// before it decodes them: DecodeHandshakePayload leaves them encoded, and
// Metadata checks the hash and then decodes them.
type HandshakePayload struct {
	// CompatibilityHash ("compatibility_hash") is the sender's
	// CompatFactors.Hash.
	CompatibilityHash string
	// AgentMetadataBytes ("agent_metadata_bytes", bin) is an encoded
	// AgentMetadata (AgentMetadata.Encode); nil when decoded empty.
	AgentMetadataBytes []byte
}

var payloadKeys = [...]string{"compatibility_hash", "agent_metadata_bytes"}

const payloadMsg = "handshake payload"

// ErrIncompatible is wrapped by Metadata's error for a compatibility hash
// that is not the local one.
var ErrIncompatible = errors.New("vllm: incompatible peer")

// Encode returns p as msgspec encodes a NixlHandshakePayload: a fixmap of
// its two keys, the hash as str, the metadata as bin.
func (p *HandshakePayload) Encode() []byte {
	b := make([]byte, 0, 48+len(p.CompatibilityHash)+len(p.AgentMetadataBytes))
	b = appendMapLen(b, len(payloadKeys))
	b = appendStr(b, payloadKeys[0])
	b = appendStr(b, p.CompatibilityHash)
	b = appendStr(b, payloadKeys[1])
	return appendBin(b, p.AgentMetadataBytes)
}

// DecodeHandshakePayload decodes a NixlHandshakePayload as msgspec's typed
// decoder does (keys in any order, unknown keys skipped, both keys
// required, str and bin exactly), refusing also a repeated key, a hash
// longer than MaxStringLen and metadata longer than
// MaxEncodedAgentMetadata. It does not decode AgentMetadataBytes: check
// the hash first (Metadata does both). The payload keeps a copy of the
// bytes it needs. Every error wraps ErrMalformed.
func DecodeHandshakePayload(b []byte) (*HandshakePayload, error) {
	rd := newReader(b)
	n, err := rd.MapLen(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", payloadMsg, err)
	}
	p := &HandshakePayload{}
	var seen [len(payloadKeys)]bool
	for range n {
		k, err := rd.RawStr(MaxStringLen)
		if err != nil {
			return nil, fmt.Errorf("%s: map key: %w", payloadMsg, err)
		}
		i := keyIndex(payloadKeys[:], k)
		if i < 0 {
			if err := rd.Skip(); err != nil {
				return nil, fmt.Errorf("%s: unknown key %q: %w", payloadMsg, k, err)
			}
			continue
		}
		if seen[i] {
			return nil, fmt.Errorf("%w: %s field %s appears twice", ErrMalformed, payloadMsg, payloadKeys[i])
		}
		seen[i] = true
		if i == 0 {
			p.CompatibilityHash, err = rd.str()
		} else {
			p.AgentMetadataBytes, err = rd.Bin(MaxEncodedAgentMetadata)
		}
		if err != nil {
			return nil, fieldErr(payloadMsg, payloadKeys[i], err)
		}
	}
	if err := rd.end(payloadMsg); err != nil {
		return nil, err
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("%w: %s field %s is missing", ErrMalformed, payloadMsg, payloadKeys[i])
		}
	}
	return p, nil
}

// Metadata checks p's compatibility hash against localHash, as vLLM does
// before it reads the metadata, and only then decodes the metadata as
// version v's (the version the hash was made with). A differing hash
// gives an error wrapping ErrIncompatible that names both.
func (p *HandshakePayload) Metadata(localHash string, v Version) (*AgentMetadata, error) {
	if p.CompatibilityHash != localHash {
		return nil, fmt.Errorf("%w: compatibility hash mismatch: local %q, remote %q", ErrIncompatible, localHash, p.CompatibilityHash)
	}
	return DecodeAgentMetadata(p.AgentMetadataBytes, v)
}

// EncodeMetaRequest returns the side channel's request for the handshake
// payload of rank (pp, tp), as vLLM sends it: the msgpack array
// [bin GetMetaMsg, pp, tp].
func EncodeMetaRequest(pp, tp int) []byte {
	b := make([]byte, 0, 2+len(GetMetaMsg)+2*9)
	b = appendArrayLen(b, 3)
	b = appendBin(b, []byte(GetMetaMsg))
	b = appendInt(b, int64(pp))
	return appendInt(b, int64(tp))
}

const requestMsg = "meta request"

// DecodeMetaRequest decodes a side-channel request: an array of exactly 3
// elements, GetMetaMsg as bin or str (vLLM only warns on another first
// element; this refuses it), then the pipeline- and tensor-parallel ranks
// asked, integers in [0, MaxInt]. Every error wraps ErrMalformed.
func DecodeMetaRequest(b []byte) (pp, tp int, err error) {
	rd := newReader(b)
	n, err := rd.ArrayLen(-1)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", requestMsg, err)
	}
	if n != 3 {
		return 0, 0, fmt.Errorf("%w: %s: array of %d elements, want 3 (%s, pp rank, tp rank)", ErrMalformed, requestMsg, n, GetMetaMsg)
	}
	c, err := rd.Peek()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", requestMsg, err)
	}
	var msg []byte
	if c >= 0xc4 && c <= 0xc6 {
		msg, err = rd.RawBin(MaxStringLen)
	} else {
		msg, err = rd.RawStr(MaxStringLen)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: element 0: %w", requestMsg, err)
	}
	if string(msg) != GetMetaMsg {
		return 0, 0, fmt.Errorf("%w: %s: element 0 is %q, want %q", ErrMalformed, requestMsg, msg, GetMetaMsg)
	}
	if pp, err = rd.int(0); err != nil {
		return 0, 0, fmt.Errorf("%s: pp rank: %w", requestMsg, err)
	}
	if tp, err = rd.int(0); err != nil {
		return 0, 0, fmt.Errorf("%s: tp rank: %w", requestMsg, err)
	}
	if err := rd.end(requestMsg); err != nil {
		return 0, 0, err
	}
	return pp, tp, nil
}

// EncodeTimestamp returns the listener's second reply frame: its clock in
// seconds as a msgpack float64, as msgspec encodes a Python float.
func EncodeTimestamp(seconds float64) []byte { return appendFloat64(make([]byte, 0, 9), seconds) }

const timestampMsg = "timestamp"

// DecodeTimestamp decodes a timestamp frame: any msgpack integer or float
// (vLLM decodes it without a schema). A bool, NaN or an infinity is
// refused, as no clock reads them. Every error wraps ErrMalformed.
func DecodeTimestamp(b []byte) (float64, error) {
	rd := newReader(b)
	f, err := rd.Number()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", timestampMsg, err)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: %s: %v is not a clock reading", ErrMalformed, timestampMsg, f)
	}
	if err := rd.end(timestampMsg); err != nil {
		return 0, err
	}
	return f, nil
}
