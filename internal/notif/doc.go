// Package notif encodes and decodes the short NIXL notification messages
// that the connectors exchange: the completion message "<request id>:<n>"
// that a transfer carries to the engine that owns the blocks, and the
// heartbeat "HB:<id>,<id>,..." that extends the leases of requests still
// waiting for their transfer. The decoders are strict: they read bytes that
// came from the network, so every malformed message gives an error that says
// what is wrong and nothing panics.
package notif
