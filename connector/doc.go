// Package connector is the API an engine codes against, whichever
// connector moves its KV cache, in the shape of database/sql: the
// connectors register themselves by name (pullconn as "pull", pushconn as
// "push"; import them for that), EngineConfig.Connector picks one, and
// NewEngine starts that connector's Engine. The Engine's NewProducer and
// NewConsumer start its TP ranks: a Producer per prefill rank and a
// Consumer per decode rank, driven with one set of names for the whole
// request lifecycle (RequestFinished, Load, KeepAlive, Drain, DrainFreed,
// Abort, DropHolds, Close) and two values: the Request a rank is given and
// the Params (vLLM's kv_transfer_params, one JSON object for both
// connectors) that prefill returns and the proxy carries to decode.
// docs/engine.md walks through an engine loop; Example_engine runs it over
// both connectors.
//
// The package also holds what both connectors share: the EngineConfig with
// the KV geometry stated once and the Protocol the engine speaks (gonixl's,
// or vLLM's for pairing with vLLM engines), the RankConfig every TP rank
// takes (agent, layout, lease, polling, clock, logger, staging), the Result
// a decode rank drains, the failure Policy, the Stats every rank and engine
// reports, the Staging options with their Copier (GPUCopier on a GPU), the
// Clock (ManualClock in tests) and the errors both report. pullconn and
// pushconn hold only their protocol: their own Config fields, typed Params
// views and errors, and their Producer and Consumer types for programs that
// use one connector directly.
package connector
