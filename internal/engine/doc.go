// Package engine is the engine-wide part that both connectors share: the
// configuration of the local engine (identity, side-channel address, the
// compatibility facts a peer must agree with) with its defaults and
// validation, the checks and publication of a rank, and the Engine that
// serves this engine's handshake payload on the side channel and fetches
// peer engines' payloads, once per peer, in gonixl's protocol or in vLLM's
// (its ZMQ side channel, internal/vllm). The public connector.Engine holds
// one; pullconn and pushconn start it with their Connector (the transfer
// mode, the error sentinels, the prefix of their messages, the hooks and
// state only pull has) and reach it, and the other public types of package
// connector, through Public.
package engine
