package vllm

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
)

// FuzzGroupLayoutOf maps arbitrary metadata (a peer's bytes) with the
// grouped test models' geometries at the peer's TP size: the mapping never
// panics, refuses with ErrUnsupported, ErrIncompatible or
// descriptors.ErrInvalid, and a layout it gives is valid and publishes
// metadata that maps back to the same layout.
func FuzzGroupLayoutOf(f *testing.F) {
	v := &groupVectors{}
	if gv, err := readGroupVectors(); err == nil {
		v = gv
	}
	for _, c := range v.Cases {
		if b, err := hex.DecodeString(c.Hex); err == nil {
			f.Add(b, uint8(c.PeerTP), uint8(c.Rank), c.Name[0]%2 == 0)
		}
	}
	for _, c := range v.Invalid {
		if b, err := hex.DecodeString(c.Hex); err == nil {
			f.Add(b, uint8(c.PeerTP), uint8(c.Rank), true)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, tp, rank uint8, hybrid bool) {
		m, err := DecodeAgentMetadata(b, V12)
		if err != nil || m.Validate() != nil {
			return
		}
		peerTP := int(tp%4) + 1
		r := int(rank) % peerTP
		shape := "swa"
		if hybrid {
			shape = "hybrid"
		}
		g := grouptest.Geometry(shape, 2, 16)
		g.KVPacked = true
		l, err := LayoutOf(m, g, r, peerTP)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrIncompatible) && !errors.Is(err, descriptors.ErrInvalid) {
				t.Fatalf("an error outside the three kinds: %v", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("the layout does not validate: %v", err)
		}
		back, err := MetadataOf(l, m.EngineID, m.AgentMetadata, m.AttnBackendName, LayoutLBHNC)
		if err != nil {
			t.Fatalf("a mapped layout does not publish: %v", err)
		}
		again, err := LayoutOf(back, g, r, peerTP)
		if err != nil {
			t.Fatalf("published metadata does not map back: %v", err)
		}
		if !reflect.DeepEqual(l, again) {
			t.Fatalf("round trip changed %+v into %+v", l, again)
		}
	})
}
