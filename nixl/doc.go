// Package nixl is gonixl's binding to NVIDIA NIXL, the transfer library that
// moves KV-cache blocks between inference engines. It defines the small
// [Agent] interface the connectors program against, the value types that cross
// it (memory types, descriptor lists, options, statuses and errors), off-heap
// host buffers ([Buffer]) and the real agent ([NativeAgent]), a cgo binding to
// NIXL's agent that is compiled only with the build tag `nixl`. Without the
// tag the package builds with no NIXL present and [New] returns an error that
// matches [ErrUnavailable]; the pure-Go agent in nixl/loopback implements the
// same interface for tests and demos.
//
// # Building with NIXL
//
// With `-tags nixl` the package calls NIXL's C API (capi.c over gonixl's own
// declarations, capi.h) and links -lnixl_capi: it needs NIXL's libraries and
// no header, so it builds against the libraries of NIXL's Python wheel, whose
// linker flags nixl/cmd/nixl-flags prints:
//
//	CGO_LDFLAGS="$(go run github.com/gonixl/gonixl/nixl/cmd/nixl-flags)" go build -tags nixl
//
// Without CGO_LDFLAGS it looks in /opt/nvidia/nvda_nixl (lib/x86_64-linux-gnu,
// lib and lib64, with an rpath to each), where a source build installs. With
// `-tags nixl,nixlcxx` it compiles a C++ shim (shim.cc) against NIXL's
// headers (nixl.h, from a source build) instead. The C API reports fewer
// statuses than NIXL's agent: over it, a failure outside NIXL_ERR_INVALID_PARAM,
// NIXL_ERR_NOT_FOUND and NIXL_ERR_NO_TELEMETRY is [StatusBackend], and the
// options it cannot carry ([Options.IncludeConnInfo], [Options.MetadataLabel],
// a non-default [Config.EtcdWatchTimeout]) give [ErrNotSupported]
// (docs/binding.md). NIXL finds its backend plugins in $NIXL_PLUGIN_DIR, else
// in plugins/ next to libnixl.so.
//
// Every method of [NativeAgent] wraps one nixlAgent call and names it in its
// documentation. Failures are *[Error] values carrying the call, NIXL's
// status and context, matching the status's sentinel with errors.Is;
// StatusInProgress is a result, not an error. A C++ exception never crosses
// into Go: the C API reports it as a failure, the C++ shim as [StatusUnknown].
//
// # Signals
//
// UCX installs handlers for SIGSEGV and SIGBUS, which the Go runtime owns: a
// recoverable nil dereference would then kill the process with a UCX
// backtrace. Before the first native agent is created, [New] therefore sets
// UCX_ERROR_SIGNALS to the empty string unless the user already set it.
// That variable does not cover the LIBFABRIC backend: once a LIBFABRIC
// backend exists in a process, a SIGSEGV handler stays installed and a Go
// nil dereference, even one a recover would catch, kills the process.
//
// # Concurrency
//
// All methods of [NativeAgent] may be called from several goroutines. Under
// [SyncNone] (NIXL's default, in which NIXL does no locking) gonixl
// serialises the calls of one agent; under [SyncStrict] or [SyncRW] NIXL
// locks, and calls such as PostXferReq run in parallel. Handles are plain
// numbers checked in Go: a released, foreign or forged handle gives
// [ErrInvalidParam], and no handle is freed while another call uses it.
// Close is idempotent, waits for calls in progress, and every method called
// after it returns an error matching [ErrClosed].
//
// # Progress
//
// Without [Config.ProgressThread] an agent makes progress only inside its
// calls, so every agent of a process, senders and receivers alike, must be
// polled (GetNotifs or XferStatus) while transfers or connections are
// pending. A goroutine that polls continuously does best locked to its OS
// thread (runtime.LockOSThread): UCX's shared-memory transport copies
// through buffers that stay in the CPU's cache only if the polling stays on
// one thread. [NativeAgent.AppendNotifs] lets a poller reuse one map, and
// [NativeAgent.Poll] (the optional [BatchPoller] interface) asks the status
// of several transfers and fetches the notifications in one cgo crossing,
// making the same NIXL calls as XferStatus on each and AppendNotifs;
// [NativeAgent.PollEach] ([NotifPoller]) does the same handing each
// notification to a function, with no map. [NativeAgent.PostXfer]
// ([XferPoster]) creates and posts a request in one crossing.
//
// # Cost of a call
//
// Each call is one cgo crossing, which on the 2-core VM of docs/binding.md
// costs 45-85 ns by itself (BenchmarkCrossing: a C function that does
// nothing), plus the agent's lock (one atomic compare-and-swap and one
// atomic add). The polling calls allocate nothing in Go. A 4 KiB round trip
// makes five NIXL calls, hence five crossings, whether polled call by call
// or with Poll, because its two agents are polled in turn: 0.25-0.4 µs of
// crossings over the same calls made from C. Batching requests into Poll is
// how to pay fewer crossings.
package nixl
