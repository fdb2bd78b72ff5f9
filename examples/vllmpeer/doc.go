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
// Roles, each a few calls a test makes (every wait has a deadline):
//
//   - pull prefill (Mode ModePull): Prefill fills and holds a request's
//     blocks and returns vLLM's kv_transfer_params (Params.JSON is the
//     exact JSON); WaitFreed waits for the completions; Report says what
//     every rank received (completions, heartbeats, refused input) and
//     what was freed or expired. With Config.Groups (each layer's
//     KV-cache group, published as region_group_ids) PrefillGroups does it
//     for a grouped attention model, one block list per group, and
//     CheckKVGroups checks a decode's groups.
//   - pull decode: ParseParams reads a prefill's kv_transfer_params, Pull
//     handshakes and READs into local blocks, Verify (VerifyFrom after a
//     prefix hit) checks every byte; Heartbeat sends "HB:".
//   - push decode (Mode ModePush): PushRegister handshakes notif-only with
//     the prefill named by a PrefillInfo and sends PUSH_REG; WaitPushed
//     waits for the WRITEs, PushCounts gives the counts, Verify checks.
//   - push prefill: PushFinished fills and holds, returning vLLM's push
//     kv_transfer_params; each rank WRITEs on its first matching PUSH_REG
//     (Report.PushRegs shows each with its keys in wire order);
//     WaitWritten waits for every rank's WRITEs.
//
// FillKV and CheckKV write and check the same content in another
// engine's memory of vLLM's layout (a gonixl engine's KVPacked layout is
// one), so tests verify the far side's bytes too.
package vllmpeer
