// Package vllm holds the wire formats of vLLM's NixlConnector and
// NixlPushConnector at NIXL_CONNECTOR_VERSION 12 to 16 (Version; version.go
// says what each changed and which release speaks it), byte
// compatible with the msgspec msgpack encoding vLLM uses: the side
// channel's GET_META_MSG request (EncodeMetaRequest) and its two-frame
// reply, the NixlHandshakePayload (HandshakePayload) wrapping a
// NixlAgentMetadata (AgentMetadata) and the listener's timestamp
// (EncodeTimestamp), and the compatibility hash both sides compare before
// trusting the metadata (CompatFactors.Hash). Decoders take bytes from the
// network, so they are strict and bounded: an error wrapping ErrMalformed,
// never a panic, and never an allocation that a length prefix asks for but
// the input cannot back. The formats were read from vLLM's source, not
// observed from a running vLLM: vllm/distributed/kv_transfer/kv_connector/v1/nixl/
// metadata.py at 02cfb534df5674737558730b10f23d1b7aef9b7c, base_worker.py
// and push_worker.py at 039e79a67a8416957c1875f9e73655a705bbcbe7,
// pull_worker.py and push_scheduler.py at
// 0316d25ab5286b130d7663b57959cc8a740b3864, base_scheduler.py and
// pull_scheduler.py at 0050936b22adda2ef0197fa3bb2551fe6c5437dc,
// vllm/distributed/kv_transfer/kv_connector/utils.py at
// 00f4240ee6458263d76cf51ca7901ce1350bb4d1, and hash_factors in
// vllm/config/utils.py (unchanged since before version 7); msgspec's
// encoding rules from jcrist/msgspec's _core.c at
// 3b2543b838a01dfac23e0b8d8746ebb273254e2d. testdata/vllm/vectors.json
// pins every format byte for byte at 12; testdata/vllm/versions.json, made
// by vLLM's own dataclasses and msgspec encoder (vllm 0.31.0 to 0.34.0),
// pins 13 to 16.
//
// LayoutOf and MetadataOf map a rank's NixlAgentMetadata to a
// descriptors.Layout and back, KV-cache groups and SSM state included
// (layout_groups.go: region_group_ids, per-region block_lens, ssm_sizes and
// physical_blocks_per_logical_kv_block as base_worker.py at 039e79a6 fills
// them, the conv split as ssm_conv_transfer_utils.py at
// 66a1a5c197f5d31bb4a00cd15d8a74c9016d577f derives it from the model);
// testdata/vllm/groups.json pins grouped metadata and its layouts.
package vllm
