// Package engine is the engine-wide part that both connectors share: the
// configuration of the local engine (identity, side-channel address, the
// compatibility facts a peer must agree with) with its defaults and
// validation, and the Engine that serves this engine's handshake payload on
// the side channel and fetches peer engines' payloads, once per peer. The
// pull and push connectors wrap it in their own Engine types; they differ
// only in the transfer mode they put in the compatibility facts, their
// error sentinel and the prefix of their messages.
package engine
