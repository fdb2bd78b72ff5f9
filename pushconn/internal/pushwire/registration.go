package pushwire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// RegPrefix starts every registration notification.
const RegPrefix = "PUSH_REG:"

// Registration is the decode side's early registration of its destination
// blocks for one request, sent to every prefill rank that will write them.
// "Remote" means the prefill engine, seen from decode.
type Registration struct {
	// RequestID is decode's id of the request; completions carry it back.
	RequestID string
	// DecodeEngineID names the decode engine; its side channel is at
	// DecodeHost:DecodePort.
	DecodeEngineID string
	DecodeHost     string
	DecodePort     int
	// DecodeTPSize is the decode engine's tensor-parallel size.
	DecodeTPSize int
	// LocalBlockIDs are decode's destination block ids, one list per
	// KV-cache group. An empty list means decode already holds everything.
	LocalBlockIDs [][]int
	// RemoteEngineID names the prefill engine the registration is for, whose
	// side channel is at RemoteHost:RemotePort.
	RemoteEngineID string
	RemoteHost     string
	RemotePort     int
	// RemoteTPSize and RemotePPSize are the prefill engine's tensor- and
	// pipeline-parallel sizes as decode knows them.
	RemoteTPSize int
	RemotePPSize int
	// TransferID, when not empty, is a router-assigned id that both sides
	// carry and that matching prefers over request ids.
	TransferID string
	// DecodeIncarnation, when not zero, is the registering decode rank's
	// incarnation (the random id its handshake payload publishes for this
	// start of the rank; our own key "decode_incarnation", absent from
	// vLLM's). Prefill compares it with the payload it holds, so that a
	// registration from an instance that has since restarted under the
	// same name is never written into the new instance's blocks.
	DecodeIncarnation uint64
	// Seq, when not zero, numbers the registration among those its decode
	// rank instance sent (our own key "registration_seq", after
	// decode_incarnation). Two registrations with the same sender and ids
	// are the same message, a duplicate, unless both carry a Seq and the
	// Seqs differ: then the later is the same request id registered again.
	Seq uint64
	// Staging, when set, names the decode staging slot prefill may WRITE
	// this request into (our own key "staging", after registration_seq; a
	// vLLM prefill skips it and writes into the blocks).
	Staging *Staging
}

// Staging is a decode staging slot offered in a registration: prefill
// rank i, when it stages, writes its image of Sizes[i] bytes at Offsets[i]
// in slot Slot of the decode rank's advertised staging memory and then
// sends PUSH_STAGED instead of the plain completion. A rank may always
// write into the blocks instead (then decode does not scatter).
//
// Parts says decode scatters progressive staged parts as they land
// (PUSH_STAGED_PART): our own key "staging_parts" beside "staging", with
// the part protocol's version (1), so that a prefill that predates it
// skips the key, and a decode that predates it never receives a part
// notification.
type Staging struct {
	Slot    int
	Offsets []uint64
	Sizes   []uint64
	Parts   bool
}

// StagingPartsVersion is the version of PUSH_STAGED_PART that "staging_parts"
// announces.
const StagingPartsVersion = 1

// MaxStagingRanks bounds the per-rank lists of a Staging.
const MaxStagingRanks = 1024

func (s *Staging) validate() error {
	switch {
	case s.Slot < 0 || s.Slot > maxFieldInt:
		return fieldError("staging", fmt.Sprintf("slot %d is out of range", s.Slot))
	case len(s.Offsets) != len(s.Sizes) || len(s.Offsets) == 0 || len(s.Offsets) > MaxStagingRanks:
		return fieldError("staging", fmt.Sprintf("has %d offsets and %d sizes, want as many, 1..%d", len(s.Offsets), len(s.Sizes), MaxStagingRanks))
	}
	for i := range s.Offsets {
		if s.Offsets[i] > 1<<62 || s.Sizes[i] > 1<<62 {
			return fieldError("staging", fmt.Sprintf("rank %d: offset %d or size %d is out of range", i, s.Offsets[i], s.Sizes[i]))
		}
	}
	return nil
}

// Validate reports the first field that no peer may send.
func (r *Registration) Validate() error {
	if err := checkIDs("PUSH_REG", []string{"request_id", "decode_engine_id", "decode_host", "remote_engine_id", "remote_host", "transfer_id"},
		r.RequestID, r.DecodeEngineID, r.DecodeHost, r.RemoteEngineID, r.RemoteHost, r.TransferID); err != nil {
		return err
	}
	switch {
	case r.RequestID == "":
		return fieldError("request_id", "is empty")
	case r.DecodeEngineID == "":
		return fieldError("decode_engine_id", "is empty")
	case r.DecodeHost == "":
		return fieldError("decode_host", "is empty")
	case r.DecodePort < 0 || r.DecodePort > 65535:
		return fieldError("decode_port", fmt.Sprintf("%d is outside 0..65535", r.DecodePort))
	case r.DecodeTPSize < 1:
		return fieldError("decode_tp_size", fmt.Sprintf("%d is below 1", r.DecodeTPSize))
	case len(r.LocalBlockIDs) == 0:
		return fieldError("local_block_ids", "has no KV-cache group")
	case r.RemoteEngineID == "":
		return fieldError("remote_engine_id", "is empty")
	case r.RemoteHost == "":
		return fieldError("remote_host", "is empty")
	case r.RemotePort < 0 || r.RemotePort > 65535:
		return fieldError("remote_port", fmt.Sprintf("%d is outside 0..65535", r.RemotePort))
	case r.RemoteTPSize < 1:
		return fieldError("remote_tp_size", fmt.Sprintf("%d is below 1", r.RemoteTPSize))
	case r.RemotePPSize < 1:
		return fieldError("remote_pp_size", fmt.Sprintf("%d is below 1", r.RemotePPSize))
	}
	for g, ids := range r.LocalBlockIDs {
		for i, id := range ids {
			if id < 0 {
				return fieldError("local_block_ids", fmt.Sprintf("group %d entry %d is negative (%d)", g, i, id))
			}
		}
	}
	if r.Staging != nil {
		return r.Staging.validate()
	}
	return nil
}

// BlockCount returns the number of block ids over all groups.
func (r *Registration) BlockCount() int {
	n := 0
	for _, ids := range r.LocalBlockIDs {
		n += len(ids)
	}
	return n
}

func fieldError(field, what string) error {
	return fmt.Errorf("%w: PUSH_REG field %s %s", ErrMalformed, field, what)
}

// IsRegistration reports whether msg starts with RegPrefix, without decoding it.
func IsRegistration(msg []byte) bool { return bytes.HasPrefix(msg, []byte(RegPrefix)) }

// AppendRegistration validates r and appends its notification bytes to dst:
// RegPrefix, then a msgpack map whose keys come in the order of the wire
// vectors, with the most compact integer widths, then transfer_id,
// decode_incarnation, registration_seq, staging and staging_parts, each
// only when set (so a registration without them encodes exactly as vLLM's
// encoder does).
func AppendRegistration(dst []byte, r *Registration) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(append(dst, RegPrefix...))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	n := 11
	if r.TransferID != "" {
		n++
	}
	if r.DecodeIncarnation != 0 {
		n++
	}
	if r.Seq != 0 {
		n++
	}
	if r.Staging != nil {
		n++
		if r.Staging.Parts {
			n++
		}
	}
	err := errors.Join(
		enc.EncodeMapLen(n),
		encodeStr(enc, "request_id", r.RequestID),
		encodeStr(enc, "decode_engine_id", r.DecodeEngineID),
		encodeStr(enc, "decode_host", r.DecodeHost),
		encodeInt(enc, "decode_port", r.DecodePort),
		encodeInt(enc, "decode_tp_size", r.DecodeTPSize),
		encodeGroups(enc, "local_block_ids", r.LocalBlockIDs),
		encodeStr(enc, "remote_engine_id", r.RemoteEngineID),
		encodeStr(enc, "remote_host", r.RemoteHost),
		encodeInt(enc, "remote_port", r.RemotePort),
		encodeInt(enc, "remote_tp_size", r.RemoteTPSize),
		encodeInt(enc, "remote_pp_size", r.RemotePPSize),
	)
	if err == nil && r.TransferID != "" {
		err = encodeStr(enc, "transfer_id", r.TransferID)
	}
	if err == nil && r.DecodeIncarnation != 0 {
		err = errors.Join(enc.EncodeString("decode_incarnation"), enc.EncodeUint(r.DecodeIncarnation))
	}
	if err == nil && r.Seq != 0 {
		err = errors.Join(enc.EncodeString("registration_seq"), enc.EncodeUint(r.Seq))
	}
	if err == nil && r.Staging != nil {
		err = encodeStaging(enc, r.Staging)
	}
	if err == nil && r.Staging != nil && r.Staging.Parts {
		err = errors.Join(enc.EncodeString("staging_parts"), enc.EncodeUint(StagingPartsVersion))
	}
	if err != nil {
		return dst, fmt.Errorf("encode PUSH_REG: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeRegistration returns r's notification bytes.
func EncodeRegistration(r *Registration) ([]byte, error) { return AppendRegistration(nil, r) }

func encodeStr(enc *msgpack.Encoder, key, v string) error {
	return errors.Join(enc.EncodeString(key), enc.EncodeString(v))
}

func encodeInt(enc *msgpack.Encoder, key string, v int) error {
	return errors.Join(enc.EncodeString(key), enc.EncodeInt(int64(v)))
}

func encodeGroups(enc *msgpack.Encoder, key string, groups [][]int) error {
	if err := errors.Join(enc.EncodeString(key), enc.EncodeArrayLen(len(groups))); err != nil {
		return err
	}
	for _, ids := range groups {
		if err := enc.EncodeArrayLen(len(ids)); err != nil {
			return err
		}
		for _, id := range ids {
			if err := enc.EncodeInt(int64(id)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Fields of a registration, as bits, to find missing and repeated keys.
const (
	fRequestID = 1 << iota
	fDecodeEngineID
	fDecodeHost
	fDecodePort
	fDecodeTPSize
	fLocalBlockIDs
	fRemoteEngineID
	fRemoteHost
	fRemotePort
	fRemoteTPSize
	fRemotePPSize
	fTransferID
	fDecodeIncarnation
	fSeq
	fStaging
	fStagingParts

	requiredFields = fTransferID - 1
)

var regFieldNames = []string{
	"request_id", "decode_engine_id", "decode_host", "decode_port", "decode_tp_size",
	"local_block_ids", "remote_engine_id", "remote_host", "remote_port",
	"remote_tp_size", "remote_pp_size", "transfer_id", "decode_incarnation",
	"registration_seq", "staging", "staging_parts",
}

// DecodeRegistration parses a PUSH_REG notification. Unknown keys are
// skipped; a missing required key, a repeated key, a value of the wrong type
// or out of range, or trailing bytes give an error wrapping ErrMalformed.
func DecodeRegistration(msg []byte) (*Registration, error) {
	if !IsRegistration(msg) {
		return nil, fmt.Errorf("%w: PUSH_REG: message does not start with %q", ErrMalformed, RegPrefix)
	}
	rd := newReader(msg, len(RegPrefix))
	n, err := rd.MapLen(-1)
	if err != nil {
		return nil, fmt.Errorf("PUSH_REG: %w", err)
	}
	var reg Registration
	var seen int
	var parts bool
	for range n {
		key, err := rd.str()
		if err != nil {
			return nil, fmt.Errorf("PUSH_REG: map key: %w", err)
		}
		bit := 0
		for i, name := range regFieldNames {
			if name == key {
				bit = 1 << i
				break
			}
		}
		if bit == 0 {
			if err := rd.Skip(); err != nil {
				return nil, fmt.Errorf("PUSH_REG: unknown field %q: %w", key, err)
			}
			continue
		}
		if seen&bit != 0 {
			return nil, fmt.Errorf("%w: PUSH_REG: field %s appears twice", ErrMalformed, key)
		}
		seen |= bit
		if bit == fStagingParts {
			// The part protocol's version: any from 1 on understands
			// version 1's PUSH_STAGED_PART (a later one that does not
			// takes another key).
			v, err := rd.Uint()
			if err == nil && v == 0 {
				err = rd.Errorf("staging_parts 0 is reserved for \"not said\": leave the key out")
			}
			if err != nil {
				return nil, fmt.Errorf("PUSH_REG: field %s: %w", key, err)
			}
			parts = true
			continue
		}
		if err := reg.decodeField(rd, bit); err != nil {
			return nil, fmt.Errorf("PUSH_REG: field %s: %w", key, err)
		}
	}
	if rd.Left() != 0 {
		return nil, fmt.Errorf("%w: PUSH_REG: %d bytes after the map", ErrMalformed, rd.Left())
	}
	if missing := requiredFields &^ seen; missing != 0 {
		for i, name := range regFieldNames {
			if missing&(1<<i) != 0 {
				return nil, fieldError(name, "is missing")
			}
		}
	}
	if parts {
		if reg.Staging == nil {
			return nil, fieldError("staging_parts", "comes without staging")
		}
		reg.Staging.Parts = true
	}
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	return &reg, nil
}

func (r *Registration) decodeField(rd *reader, bit int) error {
	var err error
	switch bit {
	case fRequestID:
		r.RequestID, err = rd.id()
	case fDecodeEngineID:
		r.DecodeEngineID, err = rd.id()
	case fDecodeHost:
		r.DecodeHost, err = rd.id()
	case fDecodePort:
		r.DecodePort, err = boundedInt(rd)
	case fDecodeTPSize:
		r.DecodeTPSize, err = boundedInt(rd)
	case fLocalBlockIDs:
		r.LocalBlockIDs, err = decodeGroups(rd)
	case fRemoteEngineID:
		r.RemoteEngineID, err = rd.id()
	case fRemoteHost:
		r.RemoteHost, err = rd.id()
	case fRemotePort:
		r.RemotePort, err = boundedInt(rd)
	case fRemoteTPSize:
		r.RemoteTPSize, err = boundedInt(rd)
	case fRemotePPSize:
		r.RemotePPSize, err = boundedInt(rd)
	case fTransferID:
		if !rd.IsNil() { // encoders that write None for "no transfer id"
			r.TransferID, err = rd.id()
		}
	case fDecodeIncarnation:
		if !rd.IsNil() { // nil, like a missing key, says nothing
			r.DecodeIncarnation, err = rd.Uint()
			if err == nil && r.DecodeIncarnation == 0 {
				err = rd.Errorf("incarnation 0 is reserved for \"not said\": leave the key out")
			}
		}
	case fSeq:
		if !rd.IsNil() {
			r.Seq, err = rd.Uint()
			if err == nil && r.Seq == 0 {
				err = rd.Errorf("registration_seq 0 is reserved for \"not said\": leave the key out")
			}
		}
	case fStaging:
		if !rd.IsNil() {
			r.Staging, err = decodeStaging(rd)
		}
	}
	return err
}

// encodeStaging writes "staging": [slot, [offsets...], [sizes...]].
func encodeStaging(enc *msgpack.Encoder, s *Staging) error {
	err := errors.Join(enc.EncodeString("staging"), enc.EncodeArrayLen(3), enc.EncodeInt(int64(s.Slot)))
	for _, l := range [][]uint64{s.Offsets, s.Sizes} {
		if err != nil {
			return err
		}
		err = enc.EncodeArrayLen(len(l))
		for _, v := range l {
			if err == nil {
				err = enc.EncodeUint(v)
			}
		}
	}
	return err
}

func decodeStaging(rd *reader) (*Staging, error) {
	n, err := rd.ArrayLen(-1)
	if err != nil {
		return nil, err
	}
	if n != 3 {
		return nil, rd.Errorf("staging is an array of %d, want [slot, offsets, sizes]", n)
	}
	s := &Staging{}
	if s.Slot, err = boundedInt(rd); err != nil {
		return nil, err
	}
	for _, l := range []*[]uint64{&s.Offsets, &s.Sizes} {
		m, err := rd.ArrayLen(-1)
		if err != nil {
			return nil, err
		}
		if m > MaxStagingRanks {
			return nil, rd.Errorf("staging list of %d entries, at most %d", m, MaxStagingRanks)
		}
		*l = make([]uint64, m)
		for i := range *l {
			if (*l)[i], err = rd.Uint(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// maxFieldInt bounds sizes and ports read from the wire so that later
// arithmetic on them (TP ratios, products) cannot overflow.
const maxFieldInt = 1 << 31

func boundedInt(rd *reader) (int, error) {
	v, err := rd.Int64()
	if err != nil {
		return 0, err
	}
	if v < -maxFieldInt || v > maxFieldInt {
		return 0, rd.Errorf("integer %d is out of range", v)
	}
	return int(v), nil
}

func decodeGroups(rd *reader) ([][]int, error) {
	n, err := rd.ArrayLen(-1)
	if err != nil {
		return nil, err
	}
	groups := make([][]int, n)
	for g := range groups {
		m, err := rd.ArrayLen(-1)
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", g, err)
		}
		ids := make([]int, m)
		for i := range ids {
			v, err := rd.Int64()
			if err != nil {
				return nil, fmt.Errorf("group %d entry %d: %w", g, i, err)
			}
			if v < 0 {
				return nil, fmt.Errorf("group %d entry %d: %w", g, i, rd.Errorf("block id %d is negative", v))
			}
			ids[i] = int(v)
		}
		groups[g] = ids
	}
	return groups, nil
}
