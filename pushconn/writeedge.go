package pushconn

import (
	"errors"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// The writer core's boundary: what it is configured with, and what it
// asks of the world around it.

// writeConfig is what the core knows of its rank and engine.
type writeConfig struct {
	engineID            string
	tpSize, ppSize      int
	world               int // vLLM's "world size" in a completion
	layout              *descriptors.Layout
	vllm                bool
	registrationTimeout time.Duration
	writeTimeout        time.Duration
	lease               time.Duration
	engineTTL           time.Duration
	maxPeers            int
	maxPending          int
}

// writeEdge is everything the core asks of the world around it. The
// shell (writer) runs it on the rank's agent, handshake client and
// staging slots; the simulation on modeled ones.
type writeEdge interface {
	// notify sends msg to decode agent to (GenNotif).
	notify(to string, msg []byte) error
	// handshake starts fetching de's payload; its result comes back as
	// handshakeDone.
	handshake(de *decodeEngine)
	// forgetHandshake drops de's payload from the engine's handshake cache.
	forgetHandshake(de *decodeEngine)
	// loadMD loads a decode agent's metadata and returns its name;
	// unloadMD drops it.
	loadMD(agent string, md []byte) (string, error)
	unloadMD(agent string) error
	// aborted reports whether the engine aborted held request id.
	aborted(id string) bool
	// post maps and posts the WRITE of h for registration pr, with
	// completion msg (see postResult).
	post(pr *pendingReg, h *hold, msg []byte) postResult
	// postPart posts the progressive WRITE of h's final blocks that pr
	// has not had yet (writeprogress.go): no completion rides it, and the
	// write's to says how far it reaches. postNotify: nothing new to
	// write; postFailed or postRetry: write pr whole at finish instead.
	postPart(pr *pendingReg, h *hold) postResult
	// poll checks a WRITE in flight once: done when every part of it
	// completed, or the error of one that failed.
	poll(wr *write) (done bool, err error)
	// release asks the agent to let go of a WRITE and reports whether it
	// did: then no byte of it moves any more.
	release(wr *write) bool
	// completed settles a WRITE that completed (its transfer requests,
	// its time, its staging slot); ended gives back the staging slot of
	// one that failed; cancel drops one at shutdown.
	completed(wr *write)
	ended(wr *write)
	cancel(wr *write)
	// free hands request id's blocks back to the engine.
	free(id string)
	// now reads the rank's clocks: wall, the configured clock
	// (registration deadlines, the lease, the memories), and mono, the
	// monotonic one (WRITE timeouts; the edge stamps a WRITE's deadline
	// as it posts it). The core reads them at the moment a deadline counts
	// from, after any I/O before it.
	now() instant
}

// postOutcome is what became of a WRITE the edge was asked to post.
type postOutcome uint8

const (
	postInFlight   postOutcome = iota // moving: polled until it ends
	postCompleted                     // completed at once
	postCancelling                    // failed, but the agent has not let go of what moved (wr.cancelling)
	postFailed                        // nothing moves: kind and err say why
	postRetry                         // the decode agent is gone (err): handshake again, then retry
	postNotify                        // nothing to write: only the completion goes
)

type postResult struct {
	what postOutcome
	wr   *write
	kind pushwire.FailKind
	err  error
}

var errEngineAborted = errors.New("the prefill engine aborted the request")
