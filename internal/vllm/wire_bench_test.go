package vllm

import "testing"

// BenchmarkDecodeAgentMetadata decodes the first agent-metadata vector
// (vLLM's own encoding): what a decoder allocates per peer handshake.
func BenchmarkDecodeAgentMetadata(b *testing.B) {
	msg := mustUnhex(b, loadWireVectors(b).AgentMetadata[0].Hex)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAgentMetadata(msg, DefaultVersion); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeHandshakePayload decodes a handshake payload that carries
// a small agent-metadata blob.
func BenchmarkDecodeHandshakePayload(b *testing.B) {
	msg := (&HandshakePayload{CompatibilityHash: "abc123", AgentMetadataBytes: make([]byte, 256)}).Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeHandshakePayload(msg); err != nil {
			b.Fatal(err)
		}
	}
}
