package loopback

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

func sampleMetadata() metadata {
	return metadata{
		Agent: "prefill-0", Fabric: 7, Conn: 3,
		Regions: []mdRegion{
			{Mem: nixl.DRAM, Addr: 0x7f0000000000, Len: 1 << 20},
			{Mem: nixl.DRAM, Addr: 0x7f0000200000, Len: 4096, Dev: 1, Meta: []byte("key")},
		},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	in := sampleMetadata()
	b, err := encodeMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	in.Magic = mdMagic
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestDecodeMetadataRefusals(t *testing.T) {
	enc := func(m metadata) []byte {
		b, err := encodeMetadata(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	noName := sampleMetadata()
	noName.Agent = ""
	vram := sampleMetadata()
	vram.Regions[0].Mem = nixl.VRAM
	wraps := sampleMetadata()
	wraps.Regions[1].Addr = ^uint64(0) - 10
	zero := sampleMetadata()
	zero.Regions[0].Len = 0
	good := enc(sampleMetadata())
	for name, b := range map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("nixlSerDes|not ours"),
		"truncated":      good[:len(good)-3],
		"other magic":    []byte{0x81, 0xa1, 'm', 0xa3, 'x', 'y', 'z'},
		"no agent name":  enc(noName),
		"VRAM region":    enc(vram),
		"wrapping range": enc(wraps),
		"empty region":   enc(zero),
		"too long":       make([]byte, maxMetadataLen+1),
	} {
		if _, err := decodeMetadata(b); !errors.Is(err, errBadMetadata) {
			t.Errorf("%s: %v, want errBadMetadata", name, err)
		}
	}
}

// FuzzDecodeMetadata: no input panics; whatever decodes, re-encodes to
// metadata that decodes the same.
func FuzzDecodeMetadata(f *testing.F) {
	b, _ := encodeMetadata(sampleMetadata())
	f.Add(b)
	b, _ = encodeMetadata(metadata{Agent: "x"})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte("nixlSerDes|Agent"))
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}) // a map claiming 2^32-1 entries
	f.Add([]byte{0x85, 0xa1, 'r', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		md, err := decodeMetadata(in)
		if err != nil {
			if !errors.Is(err, errBadMetadata) {
				t.Fatalf("error %v does not wrap errBadMetadata", err)
			}
			return
		}
		again, err := encodeMetadata(md)
		if err != nil {
			t.Fatalf("re-encoding decoded metadata: %v", err)
		}
		md2, err := decodeMetadata(again)
		if err != nil || !reflect.DeepEqual(md, md2) {
			t.Fatalf("re-decoded %+v, %v; want %+v", md2, err, md)
		}
	})
}

// FuzzLoadRemoteMD: an agent fed any bytes returns an error of NIXL's
// metadata statuses, or a name, and never panics; a failed load leaves what
// it knew unchanged.
func FuzzLoadRemoteMD(f *testing.F) {
	b, _ := encodeMetadata(sampleMetadata())
	f.Add(b)
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fab, err := NewFabric()
		if err != nil {
			t.Fatal(err)
		}
		defer fab.Close()
		a, _ := fab.NewAgent("a")
		peer, _ := fab.NewAgent("peer")
		md, _ := peer.LocalMD()
		if _, err := a.LoadRemoteMD(md); err != nil {
			t.Fatal(err)
		}
		// Let fuzzed bytes claim to be from this fabric, to reach past the
		// fabric check.
		if m, err := decodeMetadata(in); err == nil {
			m.Fabric = fab.id
			in, _ = encodeMetadata(m)
		}
		name, err := a.LoadRemoteMD(in)
		switch s := nixl.StatusOf(err); {
		case err == nil:
			if name == "" {
				t.Fatal("loaded metadata with no name")
			}
		case s == nixl.StatusMismatch, s == nixl.StatusInvalidParam, s == nixl.StatusNotAllowed, s == nixl.StatusBackend, s == nixl.StatusNotFound:
			if err := a.CheckRemoteMD("peer", nixl.XferList{}); err != nil {
				t.Fatalf("a failed load (%v) lost the known peer: %v", s, err)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
