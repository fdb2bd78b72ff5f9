// Package handshake is what two engines exchange over the side channel
// before their first transfer: the engine's id and parallel sizes, its
// compatibility facts (model, dtype, KV layout, transfer mode) with a hash
// of them, and for every rank the NIXL agent's name, metadata and KV-cache
// layout. Check refuses an incompatible pair — a push engine talking to a
// pull engine, a different model — with an error that names both values.
// Server serves one engine's payload as its ranks come up; Client fetches a
// remote engine's payload once, with a deadline, and reuses it. The same
// channel carries pull's exchanges with a prefill engine after the
// handshake: hold queries (Client.Extend, beside the heartbeats) and pins
// (Client.Confirm, beside the READs), each of which also measures the clock
// offset between the engines again.
package handshake
