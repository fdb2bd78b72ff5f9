// Package nixl is gonixl's binding to NVIDIA NIXL, the transfer library that
// moves KV-cache blocks between inference engines. It defines the small
// [Agent] interface the connectors program against, the value types that cross
// it (memory types, descriptor lists, options, statuses and errors), off-heap
// host buffers ([Buffer]) and the real agent ([NativeAgent]), a cgo binding to
// NIXL's C++ nixlAgent that is compiled only with the build tag `nixl`. Without
// the tag the package builds with no NIXL present and [New] returns an error
// that matches [ErrUnavailable]; the pure-Go agent in nixl/loopback implements
// the same interface for tests and demos.
//
// # Signals
//
// UCX installs handlers for SIGSEGV and SIGBUS, which the Go runtime owns: a
// recoverable nil dereference would then kill the process with a UCX
// backtrace. Before the first native agent is created, [New] therefore sets
// UCX_ERROR_SIGNALS to the empty string unless the user already set it.
//
// # Concurrency
//
// All methods of [NativeAgent] may be called from several goroutines; NIXL's
// own thread-sync mode ([Config.SyncMode]) decides how the C++ agent itself
// serialises them. Close is idempotent, waits for calls in flight, and every
// method called after it returns [ErrClosed].
package nixl
