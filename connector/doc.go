// Package connector is what the pull and push connectors share: the Engine
// (one engine's side channel and handshake client, made by
// pullconn.NewEngine or pushconn.NewEngine), its EngineConfig with the KV
// geometry stated once and the Protocol it speaks (gonixl's, or vLLM's for
// pairing with vLLM engines), the RankConfig every TP rank takes (agent, layout,
// lease, polling, clock, logger, staging), the Result a decode rank drains,
// the failure Policy, the Stats every rank and engine reports, the Staging
// options with their Copier (GPUCopier on a GPU), the Clock (ManualClock in
// tests) and the errors both report. A user who learns one connector knows
// these for the other; pullconn and pushconn hold only their protocol:
// Producer, Consumer, Params and what only that protocol has.
package connector
