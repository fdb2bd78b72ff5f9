package connector

import (
	"context"
	"time"
)

// Producer is a prefill engine's TP rank, as every connector runs it
// (vLLM's kv_producer): the engine hands it each finished request's blocks
// and frees them when DrainFreed says so. Engine.NewProducer makes one.
// Every method is safe for concurrent use and never blocks on I/O; after
// Close, or after the rank's Engine was closed, a call that would take new
// work returns an error matching ErrClosed.
type Producer interface {
	// RequestFinished hands over a prefilled request's blocks (r.ID,
	// r.Blocks, r.Tokens, r.TransferID) and returns its
	// kv_transfer_params, which the engine answers the prefill leg with.
	// Every rank of the engine returns the same Params for a request. The
	// blocks stay the connector's until DrainFreed returns r.ID. An error
	// means nothing was taken.
	RequestFinished(r Request) (Params, error)
	// Abort says the engine dropped request id (its answer reached
	// nobody): no transfer of it starts any more, and its blocks come out
	// of DrainFreed once none is in flight. An id not held does nothing.
	Abort(id string) error
	// DrainFreed returns the ids whose blocks the engine may reuse now,
	// each exactly once.
	DrainFreed() []string
	// Held returns how many requests' blocks the rank holds.
	Held() int
	// DropHolds is for an engine going away (why says so): it releases at
	// once the holds no decode engine is reading, and their ids come out of
	// DrainFreed; with unclaimedFor > 0 only those nobody asked about for
	// that long. It returns how many it dropped and how many stay. Pull
	// drops; push drops nothing (a push hold waits for a registration that
	// may still come, and Close tells every registered decode engine).
	DropHolds(why string, unclaimedFor time.Duration) (dropped, kept int, err error)
	// Stats returns the rank's counters.
	Stats() Stats
	// Close stops the rank: every held request comes out of DrainFreed,
	// and its memory is deregistered. It is idempotent.
	Close() error
}

// ProgressReporter is a Producer that moves a request's KV while prefill
// still computes it: push's (progressive push). An engine finds it with a
// type assertion on its Producer. Pull's Producer is none: decode READs
// only once it has prefill's answer, which exists after RequestFinished.
type ProgressReporter interface {
	// Progress reports that request r, which the engine still prefills,
	// has r.Blocks final in every layer: the request's first blocks on
	// this rank, one list in token order (a layout of several KV-cache
	// groups is refused, ErrInvalid), every token of each computed (a
	// chunk of chunked prefill ended). r.Tokens is the prompt's length and
	// r.TransferID the one RequestFinished will carry. Each report of a
	// request extends the previous one, and RequestFinished still comes,
	// with the whole list. From the first report the blocks are the
	// connector's as after RequestFinished: they come out of DrainFreed,
	// and Abort withdraws the request (RequestFinished is then refused).
	// Decode sees no difference: the same completion, after every byte.
	// With r.FinalLayers > 0 a report is per layer: the blocks beyond
	// those final in every layer are final in the first r.FinalLayers
	// layers (see Request.FinalLayers).
	Progress(r Request) error
}

// Consumer is a decode engine's TP rank, as every connector runs it
// (vLLM's kv_consumer): the engine starts each remote-prefilled request's
// transfer once it allocated its blocks, and drains one Result per request.
// Engine.NewConsumer makes one. Every method is safe for concurrent use and
// never blocks on I/O; after Close, or after the rank's Engine was closed,
// a call that would take new work returns an error matching ErrClosed.
type Consumer interface {
	// Load starts moving request r's KV into r.Blocks (vLLM's
	// start_load_kv): pull READs prefill's blocks, push registers the
	// blocks with the prefill engine, which WRITEs them when it finishes.
	// r.Params are the decode leg's kv_transfer_params. Its Result comes
	// out of Drain, exactly once. An error means nothing was started.
	Load(r Request) error
	// KeepAlive is for a request that waits for blocks (queued): pull keeps
	// prefill's hold of r alive until Load or Abort; push has nothing to
	// keep (the registration is the Load) and does nothing.
	KeepAlive(r Request) error
	// Abort ends request id early (its client went away): its Result, with
	// an error matching ErrAborted, comes out of Drain once nothing can
	// still write into its blocks. A request that already ended, or an id
	// never loaded, does nothing.
	Abort(id string) error
	// Drain returns the requests that ended since the last call, each
	// exactly once.
	Drain() []Result
	// Ready is signalled whenever results wait for Drain, for an engine
	// that would rather sleep than poll.
	Ready() <-chan struct{}
	// Pending returns how many requests wait for their Result.
	Pending() int
	// Stats returns the rank's counters.
	Stats() Stats
	// Close stops the rank; the Results of requests still pending come out
	// of Drain. It is idempotent.
	Close() error
}

// Request is one request as a rank's calls take it.
type Request struct {
	// ID is the engine's id of the request (vLLM's request_id).
	ID string
	// Blocks are the rank's logical block ids of the request, one list per
	// KV-cache group of the rank's layout in its group order (one list for
	// a layout without groups), each in token order. On prefill, the blocks
	// holding the request's KV; on decode, the blocks to fill (after a
	// prefix-cache hit, those still to fill; all lists empty: decode has
	// it all).
	Blocks [][]int
	// Tokens is the prompt's length the lists cover (vLLM's
	// num_computed_tokens): required for a layout with groups; otherwise
	// optional, and needed only when prefill's blocks are larger than
	// decode's and decode had a prefix-cache hit.
	Tokens int
	// TransferID is a router-assigned id both legs carry (kv_transfer_params'
	// transfer_id; on decode, Params.TransferID when empty): push matches
	// prefill and decode on it before request ids; pull does not use it.
	TransferID string
	// FinalLayers is read by ProgressReporter.Progress only (per-layer
	// progress: a layer of prefill's forward pass ended). 0 reports Blocks
	// final in every layer. n > 0 reports the blocks after those an
	// earlier report gave final in every layer as final in layers [0, n)
	// of the rank's layout (its first n layers), the earlier ones staying
	// final in every layer. n equal to the layout's NumLayers is 0.
	FinalLayers int
	// Params (decode) are the decode leg's kv_transfer_params: the prefill
	// answer's (pull), or the prefill engine's coordinates that the proxy
	// had before prefill ran (push: remote_engine_id, remote_host,
	// remote_port, tp_size, pp_size).
	Params Params
	// Context carries the request's trace (an OpenTelemetry span context,
	// as trace.ContextWithSpan or a propagator's Extract puts it there):
	// the rank records its spans of the request as children of that span
	// (RankConfig.TracerProvider; docs/metrics.md). nil, or a context
	// without a span, traces nothing. The rank uses nothing else of it: it
	// cancels nothing.
	Context context.Context
}
