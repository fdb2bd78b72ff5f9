package pushwire

import (
	"bytes"
	"errors"
	"testing"
)

func TestStagedRoundTrip(t *testing.T) {
	msg, err := EncodeStaged("req-1:x", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != "PUSH_STAGED:req-1:x:4" {
		t.Fatalf("message %q", msg)
	}
	c, err := DecodeStaged(msg)
	if err != nil || c.ID != "req-1:x" || c.N != 4 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	msg, err = EncodeStaged("req-1:x", 4, 77)
	if err != nil || string(msg) != "PUSH_STAGED:req-1:x:4#77" {
		t.Fatalf("message %q, %v", msg, err)
	}
	if c, err := DecodeStaged(msg); err != nil || c.ID != "req-1:x" || c.N != 4 || c.Seq != 77 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	for _, bad := range []string{"req:4", "PUSH_STAGED:", "PUSH_STAGED:req", "PUSH_STAGED:req:0", "PUSH_STAGED::4", "PUSH_STAGED:req:4#", "PUSH_STAGED:req:4#0"} {
		if _, err := DecodeStaged([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: err = %v", bad, err)
		}
	}
}

func FuzzDecodeStaged(f *testing.F) {
	f.Add([]byte("PUSH_STAGED:req-1:2"))
	f.Add([]byte("PUSH_STAGED:a:b:1"))
	f.Add([]byte("PUSH_STAGED:a:b:1#42"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := DecodeStaged(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := EncodeStaged(c.ID, c.N, c.Seq)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", c, err)
		}
		if back, err := DecodeStaged(again); err != nil || back != c {
			t.Fatalf("round trip %+v -> %q -> %+v, %v", c, again, back, err)
		}
	})
}

func TestRegistrationStaging(t *testing.T) {
	r := sampleRegistration()
	plain, err := EncodeRegistration(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Staging = &Staging{Slot: 3, Offsets: []uint64{0, 4096}, Sizes: []uint64{4096, 4096}}
	msg, err := EncodeRegistration(r)
	if err != nil {
		t.Fatal(err)
	}
	// The key comes last, after everything a vLLM encoder writes.
	if !bytes.Contains(msg, []byte("\xa7staging\x93\x03\x92\x00\xcd\x10\x00\x92\xcd\x10\x00\xcd\x10\x00")) || len(msg) <= len(plain) {
		t.Fatalf("encoding %x", msg)
	}
	got, err := DecodeRegistration(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !equalRegistration(got, r) {
		t.Fatalf("round trip %+v", got.Staging)
	}
	for _, bad := range []*Staging{
		{Slot: -1, Offsets: []uint64{0}, Sizes: []uint64{1}},
		{Slot: 0, Offsets: []uint64{0}, Sizes: nil},
		{Slot: 0},
		{Slot: 0, Offsets: []uint64{1 << 63}, Sizes: []uint64{1}},
	} {
		r.Staging = bad
		if _, err := EncodeRegistration(r); !errors.Is(err, ErrMalformed) {
			t.Fatalf("staging %+v: err = %v", bad, err)
		}
	}
}

func TestStagedChunkRoundTrip(t *testing.T) {
	msg, err := EncodeStagedChunk("req-1:x", 4, 2, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != "PUSH_STAGED_CHUNK:2:8:req-1:x:4" {
		t.Fatalf("message %q", msg)
	}
	c, err := DecodeStagedChunk(msg)
	if err != nil || c.ID != "req-1:x" || c.N != 4 || c.Chunk != 2 || c.Chunks != 8 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	msg, err = EncodeStagedChunk("req-1:x", 4, 2, 8, 1<<40)
	if err != nil || string(msg) != "PUSH_STAGED_CHUNK:2:8:req-1:x:4#1099511627776" {
		t.Fatalf("message %q, %v", msg, err)
	}
	if c, err := DecodeStagedChunk(msg); err != nil || c.ID != "req-1:x" || c.Seq != 1<<40 || c.Chunk != 2 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	for _, bad := range []string{
		"PUSH_STAGED:req:4", "PUSH_STAGED_CHUNK:", "PUSH_STAGED_CHUNK:1:req:4", "PUSH_STAGED_CHUNK:8:8:req:4",
		"PUSH_STAGED_CHUNK:0:0:req:4", "PUSH_STAGED_CHUNK:01:8:req:4", "PUSH_STAGED_CHUNK:1:12345:req:4",
		"PUSH_STAGED_CHUNK:-1:8:req:4", "PUSH_STAGED_CHUNK:1:8:req:0", "PUSH_STAGED_CHUNK:1:8::4", "PUSH_STAGED_CHUNK:1:8:req",
	} {
		if _, err := DecodeStagedChunk([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: err = %v", bad, err)
		}
	}
	for _, bad := range [][2]int{{0, 0}, {3, 3}, {-1, 2}, {0, 10000}} {
		if _, err := EncodeStagedChunk("r", 1, bad[0], bad[1], 0); !errors.Is(err, ErrMalformed) {
			t.Fatalf("chunk %d of %d: err = %v", bad[0], bad[1], err)
		}
	}
}

func FuzzDecodeStagedChunk(f *testing.F) {
	f.Add([]byte("PUSH_STAGED_CHUNK:0:8:req-1:2"))
	f.Add([]byte("PUSH_STAGED_CHUNK:7:8:a:b:1"))
	f.Add([]byte("PUSH_STAGED_CHUNK:7:8:a:b:1#9"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := DecodeStagedChunk(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := EncodeStagedChunk(c.ID, c.N, c.Chunk, c.Chunks, c.Seq)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", c, err)
		}
		if back, err := DecodeStagedChunk(again); err != nil || back != c {
			t.Fatalf("round trip %+v -> %q -> %+v, %v", c, again, back, err)
		}
	})
}
