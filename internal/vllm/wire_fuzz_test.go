package vllm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Every fuzz target checks that its decoder never panics, that every error
// wraps ErrMalformed, and that whatever decodes re-encodes to bytes that
// decode to the same value, with the canonical encoding a fixed point; an
// accepted input must also be well-formed msgpack for another decoder.
// The byte and allocation budgets on crafted inputs are in
// TestDecodersIgnoreLengthClaims and TestDecodeAllocationIsBoundedByInput.

func seedAll(f *testing.F) *wireVectors {
	v := loadWireVectors(f)
	add := func(h string) {
		if b, err := hex.DecodeString(h); err == nil {
			f.Add(b)
		}
	}
	for _, c := range v.MetaRequests {
		add(c.Hex)
	}
	for _, c := range v.MetaRequestsDecodeOnly {
		add(c.Hex)
	}
	for _, c := range v.MetaRequestsInvalid {
		add(c.Hex)
	}
	for _, c := range v.Timestamps {
		add(c.Hex)
	}
	for _, c := range v.TimestampsDecodeOnly {
		add(c.Hex)
	}
	for _, c := range v.TimestampsInvalid {
		add(c.Hex)
	}
	for _, c := range v.AgentMetadata {
		add(c.Hex)
	}
	for _, c := range v.AgentMetadataDecodeOnly {
		add(c.Hex)
	}
	for _, c := range v.AgentMetadataInvalid {
		if len(c.Hex) < 4096 {
			add(c.Hex)
		}
	}
	for _, c := range v.Payloads {
		add(c.Hex)
	}
	for _, c := range v.PayloadsInvalid {
		add(c.Hex)
	}
	return v
}

func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatalf("accepted bytes %x are not msgpack to another decoder: %v", b, err)
	}
}

func mustMalformed(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v does not wrap ErrMalformed", err)
	}
}

func FuzzDecodeAgentMetadata(f *testing.F) {
	seedAll(f)
	f.Add(sampleMetadata().Encode(V12))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeAgentMetadata(b, V12)
		if err != nil {
			mustMalformed(t, err)
			if m != nil {
				t.Fatal("an error returns no metadata")
			}
			return
		}
		wellFormed(t, b)
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded metadata does not validate: %v", err)
		}
		enc := m.Encode(V12)
		back, err := DecodeAgentMetadata(enc, V12)
		if err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v\n%x", err, enc)
		}
		if !reflect.DeepEqual(m, back) {
			t.Fatalf("round trip changed %+v into %+v", m, back)
		}
		if !bytes.Equal(enc, back.Encode(V12)) {
			t.Fatal("the encoding is not a fixed point")
		}
	})
}

func FuzzDecodeHandshakePayload(f *testing.F) {
	v := seedAll(f)
	hash := v.Hashes[0].SHA256
	f.Add((&HandshakePayload{CompatibilityHash: hash, AgentMetadataBytes: sampleMetadata().Encode(V12)}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeHandshakePayload(b)
		if err != nil {
			mustMalformed(t, err)
			if p != nil {
				t.Fatal("an error returns no payload")
			}
			return
		}
		wellFormed(t, b)
		enc := p.Encode()
		back, err := DecodeHandshakePayload(enc)
		if err != nil {
			t.Fatalf("re-encoded payload does not decode: %v", err)
		}
		if !reflect.DeepEqual(p, back) || !bytes.Equal(enc, back.Encode()) {
			t.Fatalf("round trip changed %+v into %+v", p, back)
		}
		// The second phase neither panics nor accepts another hash.
		if _, err := p.Metadata(p.CompatibilityHash+"x", V12); !errors.Is(err, ErrIncompatible) {
			t.Fatalf("a differing hash gave %v", err)
		}
		if md, err := p.Metadata(p.CompatibilityHash, V12); err != nil {
			mustMalformed(t, err)
		} else if err := md.Validate(); err != nil {
			t.Fatalf("decoded metadata does not validate: %v", err)
		}
	})
}

func FuzzDecodeMetaRequest(f *testing.F) {
	seedAll(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		pp, tp, err := DecodeMetaRequest(b)
		if err != nil {
			mustMalformed(t, err)
			return
		}
		wellFormed(t, b)
		if pp < 0 || tp < 0 || pp > MaxInt || tp > MaxInt {
			t.Fatalf("ranks %d, %d out of range", pp, tp)
		}
		enc := EncodeMetaRequest(pp, tp)
		pp2, tp2, err := DecodeMetaRequest(enc)
		if err != nil || pp2 != pp || tp2 != tp {
			t.Fatalf("round trip of (%d, %d) gave (%d, %d), %v", pp, tp, pp2, tp2, err)
		}
	})
}

func FuzzDecodeTimestamp(f *testing.F) {
	seedAll(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeTimestamp(b)
		if err != nil {
			mustMalformed(t, err)
			return
		}
		wellFormed(t, b)
		if math.IsNaN(s) || math.IsInf(s, 0) {
			t.Fatalf("accepted %v", s)
		}
		back, err := DecodeTimestamp(EncodeTimestamp(s))
		if err != nil || math.Float64bits(back) != math.Float64bits(s) {
			t.Fatalf("round trip of %v gave %v, %v", s, back, err)
		}
	})
}
