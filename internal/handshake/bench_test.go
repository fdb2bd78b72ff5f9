package handshake

import (
	"context"
	"testing"
)

// BenchmarkConfirmRoundTrip is one side-channel round trip of a
// confirmation of one hold on loopback: what pull's confirmation adds to
// the critical path (compare BenchmarkCriticalPath in examples/critbench
// before and after).
func BenchmarkConfirmRoundTrip(b *testing.B) {
	s, err := Serve("127.0.0.1:0", engine(1), ServerOptions{OnConfirm: func(_, _ string, refs []HoldRef) []string {
		return make([]string, len(refs))
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, err := NewClient("decode-e", compat(ModePull), 1e9, 0)
	if err != nil {
		b.Fatal(err)
	}
	refs := []HoldRef{{ID: "cmpl-0123456789abcdef-0", Key: 7, N: 2, Ranks: []int{0}}}
	addr := s.Addr().String()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Confirm(context.Background(), "prefill-e", addr, "decode-e-0", refs); err != nil {
			b.Fatal(err)
		}
	}
}
