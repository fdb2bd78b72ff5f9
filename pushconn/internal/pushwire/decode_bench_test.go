package pushwire

import "testing"

// BenchmarkDecodeRegistration decodes one PUSH_REG with a 5-block group:
// the per-request decode cost on a prefill rank.
func BenchmarkDecodeRegistration(b *testing.B) {
	msg, err := EncodeRegistration(sampleRegistration())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRegistration(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFailure decodes one PUSH_FAIL.
func BenchmarkDecodeFailure(b *testing.B) {
	msg, err := EncodeFailure(&Failure{RequestID: "cmpl-1-0-deadbeef", EngineID: "pre", Kind: FailPost, Reason: "transfer failed"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeFailure(msg); err != nil {
			b.Fatal(err)
		}
	}
}
