// Package nixltest is the conformance suite for implementations of
// [nixl.Agent]: RunAgentSuite checks, on agents a Factory makes, the
// behaviours gonixl's connectors rely on — memory registration, metadata
// exchange, READ and WRITE with the bytes verified, notifications (exact
// bytes, per-sender order, none lost), the errors for bad descriptors,
// unknown and invalidated peers and released handles, Close while another
// goroutine polls, and many transfers at once. It runs on the pure-Go
// loopback agent in every build and on the native NIXL agent under the
// `nixl` build tag; where the two disagree, the native agent's behaviour is
// the reference. Errors are checked by sentinel (errors.Is) where NIXL
// documents the status, and only for being non-nil where it does not.
package nixltest
