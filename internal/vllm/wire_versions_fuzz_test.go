package vllm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeAgentMetadataVersions is FuzzDecodeAgentMetadata at every
// version spoken: no panic, every error wraps ErrMalformed, and what
// decodes at a version re-encodes at it to bytes that decode alike, the
// canonical encoding a fixed point.
func FuzzDecodeAgentMetadataVersions(f *testing.F) {
	vs := loadWireVectors(f)
	var seeds []string
	for _, c := range append(vs.AgentMetadata, vs.AgentMetadataDecodeOnly...) {
		seeds = append(seeds, c.Hex)
	}
	for _, c := range vs.AgentMetadataInvalid[:10] {
		seeds = append(seeds, c.Hex)
	}
	for _, h := range seeds {
		f.Add(mustUnhex(f, h), uint8(0))
		f.Add(mustUnhex(f, h), uint8(4))
	}
	for v := OldestVersion; v <= NewestVersion; v++ {
		f.Add(sampleMetadataAt(v).Encode(v), uint8(v-OldestVersion))
		f.Add(pairedSample().Encode(v), uint8(v-OldestVersion))
	}
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		v := OldestVersion + Version(n)%(NewestVersion-OldestVersion+1)
		m, err := DecodeAgentMetadata(b, v)
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
		enc := m.Encode(v)
		back, err := DecodeAgentMetadata(enc, v)
		if err != nil {
			t.Fatalf("version %d: re-encoded metadata does not decode: %v\n%x", v, err, enc)
		}
		if !reflect.DeepEqual(m, back) {
			t.Fatalf("version %d: round trip changed %+v into %+v", v, m, back)
		}
		if !bytes.Equal(enc, back.Encode(v)) {
			t.Fatal("the encoding is not a fixed point")
		}
	})
}

// FuzzPairByLayer pairs whatever metadata decodes at version 16 with a
// model of three layers: no panic, every refusal matching ErrIncompatible
// or ErrUnsupported, and a pairing that keeps every region once, the
// regions in the order of their first local layer.
func FuzzPairByLayer(f *testing.F) {
	f.Add(pairedSample().Encode(V16))
	f.Add(sampleMetadataAt(V16).Encode(V16))
	names := []string{"model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn", "model.layers.2.self_attn.attn"}
	groups := []int{0, 0, 1}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeAgentMetadata(b, V16)
		if err != nil {
			return
		}
		before := m.Encode(V16)
		p, err := PairByLayer(m, names, groups)
		if !bytes.Equal(before, m.Encode(V16)) {
			t.Fatal("PairByLayer changed its input")
		}
		if err != nil {
			if !errors.Is(err, ErrIncompatible) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("refusal %v matches neither ErrIncompatible nor ErrUnsupported", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("paired metadata does not validate: %v", err)
		}
		if len(p.KVCachesBaseAddr) != len(m.KVCachesBaseAddr) {
			t.Fatalf("%d regions paired of %d", len(p.KVCachesBaseAddr), len(m.KVCachesBaseAddr))
		}
		last := -1
		for _, members := range p.RegionMembers {
			first := len(names)
			for _, name := range members {
				for i, n := range names {
					if n == name {
						first = min(first, i)
					}
				}
			}
			if first <= last || first == len(names) {
				t.Fatalf("regions out of local layer order: %q", p.RegionMembers)
			}
			last = first
		}
	})
}
