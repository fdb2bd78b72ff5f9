// Package sidechannel is the TCP side channel two engines use before any
// NIXL transfer: a client asks, a server answers, each message one
// length-prefixed msgpack frame. It is typed by its user (the handshake
// package puts its hello and reply in it) and hardened for input from the
// network: frames have a size limit, every read and write has a deadline,
// and a malformed frame is counted and closes its connection without
// touching any state. Cache adds what a connector needs on top: at most one
// fetch in flight per remote engine, and reuse of the result after success.
package sidechannel
