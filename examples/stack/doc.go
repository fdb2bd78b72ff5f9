// Package stack starts the reference serving stack in one process: one
// prefill engine and one decode engine (examples/engine/server) and the P/D
// proxy (examples/proxy/pd) in front of them, all on 127.0.0.1 over real
// HTTP, as three processes would run them; or, in ModeCollocated, engines
// that prefill and decode their own requests behind a balancer. The demo (examples/disagg) and
// the serving benchmark (examples/bench) start a fresh stack per run, so that
// no run inherits another's handshakes, caches or held blocks.
package stack
