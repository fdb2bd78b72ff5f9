package loopback

import (
	"errors"
	"runtime"
	"testing"
)

// hugeClaims are small blobs whose headers claim gigabytes: strings,
// binaries, extensions, lists and maps, at the top and inside a region.
var hugeClaims = map[string][]byte{
	"agent str32 4G":     {0x81, 0xa1, 'a', 0xdb, 0xff, 0xff, 0xff, 0xff},
	"magic str32 1G":     {0x81, 0xa1, 'm', 0xdb, 0x40, 0, 0, 0},
	"unknown bin32 4G":   {0x81, 0xa1, 'z', 0xc6, 0xff, 0xff, 0xff, 0xff},
	"unknown ext32 4G":   {0x81, 0xa1, 'z', 0xc9, 0xff, 0xff, 0xff, 0xff, 1},
	"map32 4G entries":   {0xdf, 0xff, 0xff, 0xff, 0xff},
	"regions array32 4G": {0x81, 0xa1, 'r', 0xdd, 0xff, 0xff, 0xff, 0xff},
	"region meta bin32":  {0x81, 0xa1, 'r', 0x91, 0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff},
	"unknown array16":    {0x81, 0xa1, 'z', 0xdc, 0xff, 0xff},
}

// Defect 10: every refused blob that claimed a huge length grew a pooled
// msgpack decoder's buffer by a MiB or more, for good (60 blobs of 9 bytes
// left 3.9 GiB). Now a refused blob allocates a small multiple of its size.
func TestRefusedMetadataAllocatesLittle(t *testing.T) {
	const rounds = 60
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	size := 0
	for range rounds {
		for name, b := range hugeClaims {
			if _, err := decodeMetadata(b); !errors.Is(err, errBadMetadata) {
				t.Fatalf("%s: %v, want errBadMetadata", name, err)
			}
			size += len(b)
		}
	}
	runtime.ReadMemStats(&ms1)
	calls := rounds * len(hugeClaims)
	alloc := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("%d refused blobs of %d bytes in all allocated %d bytes (%d per blob)", calls, size, alloc, alloc/uint64(calls))
	// An error message and a little bookkeeping per blob; the old decoder
	// allocated at least 1 MiB per blob here.
	if perBlob := alloc / uint64(calls); perBlob > 2048 {
		t.Errorf("a refused blob allocated %d bytes on average, want at most 2 KiB", perBlob)
	}

	for name, b := range hugeClaims {
		avg := testing.AllocsPerRun(20, func() { decodeMetadata(b) })
		if avg > 16 {
			t.Errorf("%s: %.0f allocations per refusal", name, avg)
		}
	}
}

// The shape check refuses what the decoder would over-allocate for, and
// accepts every blob an agent makes.
func TestCheckShape(t *testing.T) {
	b, err := encodeMetadata(sampleMetadata())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkShape(b); err != nil {
		t.Fatalf("own metadata refused: %v", err)
	}
	if err := checkShape(append(b, 0xc0)); err == nil {
		t.Error("trailing byte accepted")
	}
	deep := make([]byte, 0, 40)
	for range maxMDDepth + 2 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	if err := checkShape(deep); err == nil {
		t.Error("deep nesting accepted")
	}
	if err := checkShape([]byte{0xc1}); err == nil {
		t.Error("0xc1 accepted")
	}
	for name, b := range hugeClaims {
		if err := checkShape(b); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}
