// Package vllmpeer is a test peer that plays a vLLM engine's side of vLLM's
// NIXL connector at NIXL_CONNECTOR_VERSION 12: the ZMQ side channel
// (GET_META_MSG, NixlHandshakePayload, the timestamp frame), the
// compatibility hash, NixlAgentMetadata, the kv_transfer_params vLLM's pull
// scheduler writes, vLLM's descriptor ids, the completion and heartbeat
// notifications of pull, and PUSH_REG and the WRITE notifications of push.
//
// It is written from the facts in docs/vllm.md, not from gonixl's own vLLM
// code: it imports none of internal/vllm, internal/engine, connector,
// pullconn or pushconn, only the nixl package (for the agent), msgpack and
// zmq4. A bug shared by the library and the peer would otherwise pass every
// test between them; written apart, a misreading of vLLM's wire shows up as a
// disagreement.
//
// A Peer is one engine: one NIXL agent and one KV buffer per TP rank, and
// the side channel all ranks share. Its KV memory is vLLM's version-12
// layout: one region per layer holding K and V packed, blocks back to back,
// head-major inside a block (HND), so a rank's heads are one run of every
// block. Its KV content is the reference engine's deterministic fill
// (docs/kvfill.md, implemented here from that page), so that the reference
// engine and this peer can check each other's bytes.
//
// Roles: pull prefill (Prefill, then Report and WaitFreed), pull decode
// (Pull), push decode (PushRegister, then WaitPushed) and push prefill
// (PushFinished, then WaitWritten). Every wait has a deadline.
package vllmpeer
