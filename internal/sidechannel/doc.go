// Package sidechannel is the TCP side channel two engines use before any
// NIXL transfer: a client asks, a server answers, each message one
// length-prefixed msgpack frame. It is typed by its user (the handshake
// package puts its hello and reply in it) and hardened for input from the
// network: frames have a size limit (a server's is what a client's largest
// request can be), bodies are read as their bytes arrive so memory follows
// what a peer sent rather than what its header claims, every read and write
// has a deadline (a frame's body its own), a server serves a bounded number
// of connections (the others are closed and counted), a malformed frame is
// counted and closes its connection without touching any state, and a peer
// that speaks HTTP (an API port given for a side-channel port) is named as
// such. Pool keeps connections for frequent calls, for less time than a
// server keeps them idle, and repeats a call on a new connection when a kept
// one was closed before the reply. Cache adds what a connector needs on
// top: at most one fetch in flight per remote engine, and reuse of the
// result after success.
package sidechannel
