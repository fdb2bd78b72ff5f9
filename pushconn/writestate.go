package pushconn

import (
	"bytes"
	"time"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/xfertime"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// The prefill rank's records, which the writer core (writecore.go) keeps
// and its shell (writer.go) reads to run a WRITE: a finished request's
// blocks, a registration, a decode engine, a WRITE in flight.

// hold is a finished request's blocks on a prefill rank, from
// RequestFinished until they are freed.
type hold struct {
	id         string
	transferID string
	blocks     []int
	// groups are a grouped request's lists (RequestFinishedGroups), one
	// per KV-cache group; blocks is then nil.
	groups    [][]int
	tokens    int
	finished  time.Time // when RequestFinished took it: the lease counts from here
	writes    int       // WRITEs started and not yet ended
	inMatcher bool      // still waiting for registrations
	released  bool
	// progressive: the engine reported progress (Producer.Progress) and
	// has not finished the request yet; blocks[:final] are final in every
	// layer, blocks[final:] in the rank's layers [0, layers) (0: none, a
	// per-layer report's tail), and only those may be written.
	progressive bool
	final       int
	layers      int
	// reported orders the holds of progress reports by their first report
	// (writeCore.reports), so that progressed picks one by a rule, not by
	// map order.
	reported uint64
}

// pendingReg is a registration admitted into the matcher.
type pendingReg struct {
	reg    *pushwire.Registration
	sender string // the decode rank's agent
	peer   *decodeEngine
	rank   int  // the decode TP rank sender belongs to
	retry  bool // already retried after a fresh handshake
	// incarnation is the instance of the sender's rank this registration
	// was admitted for (its payload's Incarnation): a WRITE goes only into
	// that instance, never into one that restarted under the same name.
	incarnation uint64
	// metadata is that rank's agent metadata in the same payload: without
	// incarnations (vLLM's protocol) it is what tells a restarted instance
	// of the same agent name from the one that registered.
	metadata []byte
	// Progressive push (writeprogress.go): the blocks of progress (the hold
	// whose final blocks were written before it finished) that landed,
	// h.blocks[:written] (0: none) in every layer, and h.blocks[written:
	// tailTo] in the rank's layers [0, tailLayers) (per layer,
	// writelayers.go); partial, the one progressive WRITE of it in flight,
	// if any (its final WRITE waits for it: finalWaits, for finalHold);
	// skip, no more progressive WRITEs (written whole at finish); partInto,
	// which way its parts go (stageprogress.go).
	progress   *hold
	written    int
	tailTo     int
	tailLayers int
	partial    *write
	skip       bool
	finalWaits bool
	finalHold  *hold
	partInto   int
}

// decodeEngine is a decode engine as one prefill rank sees it.
type decodeEngine struct {
	key      string
	engineID string
	addr     string
	tp       int // its TP size, as its registrations say (vLLM's payload does not)
	payload  *handshake.Payload
	targets  map[string]int // decode agents this rank writes into -> their TP rank
	busy     bool           // handshake in flight
	parked   []parkedReg    // registrations waiting for the handshake
	rewrites []rewrite      // matched WRITEs waiting for a new handshake
	acks     []ackOrder     // PUSH_CANCEL_ACKs to send once the handshake is done
	refs     int            // its registrations admitted and not yet ended
	lastUsed time.Time      // its latest registration, to evict the least recently used
	// retired holds the incarnations of payloads this rank dropped (the
	// engine restarted or its agents left), newest last, so a late
	// registration from a dead instance is recognised without a handshake.
	retired []uint64
	// prev and prevTargets are the payload and targets that forget dropped,
	// kept until a fresh handshake succeeds, so that handshake can tell
	// whether the engine restarted (decoderestart.go).
	prev        *handshake.Payload
	prevTargets map[string]int
	// dead holds the names of agents of incarnations that the engine
	// replaced with agents of other names, newest last (at most
	// retiredCap): a registration from one is dropped without a handshake.
	dead []string
	// unload holds dead agents whose metadata waits for the WRITEs in
	// flight into them to end before it is unloaded.
	unload []string
}

// retiredCap bounds decodeEngine.retired: a few restarts of a TP 8 engine.
const retiredCap = 64

// ackOrder is a PUSH_CANCEL_ACK owed to decode agent to.
type ackOrder struct {
	to string
	c  *pushwire.Cancel
}

// rewrite is a matched WRITE whose decode engine's metadata went stale (it
// restarted): it is retried once after a fresh handshake.
type rewrite struct {
	reg  *pendingReg
	hold *hold
}

type parkedReg struct {
	sender   string
	reg      *pushwire.Registration
	received time.Time // its registration timeout counts from here
	// refetched: it waits for a handshake it caused because its
	// incarnation differed from the payload held; if the fresh payload
	// differs too, it comes from a dead instance.
	refetched bool
}

// write is one WRITE in flight.
type write struct {
	reg  *pendingReg
	hold *hold
	// handles are its transfer requests still held: one for a direct
	// WRITE, one per chunk not yet seen complete for a staged one.
	handles  []nixl.XferHandle
	posted   time.Time // wall clock, for the transfer time
	deadline time.Time // on the rank's monotonic clock (Producer.mono)
	bytes    uint64
	descs    int
	// acks are the PUSH_CANCELs of its registration that arrived while it
	// was in flight: each is answered when it ends.
	acks []*pushwire.Cancel
	// postTimed: its post time was recorded on the rank's clock (NIXL's
	// telemetry did not time posts yet, or cannot). times: a direct
	// WRITE's times, read as its request completed, before its release.
	postTimed bool
	times     xfertime.Times
	// cancelling: the WRITE failed or timed out but the agent would not
	// release it yet, so it may still be moving bytes. Nothing is told or
	// freed until the agent lets go (or until drainUntil, counted).
	cancelling bool
	failErr    error
	drainUntil time.Time // on the rank's monotonic clock
	// slot is the prefill staging slot a staged WRITE reads, released
	// once the WRITE ended (nil for a direct WRITE).
	slot *staging.Slot
	// partial: a progressive WRITE (no completion) after which its
	// registration has had hold.blocks[:to] in every layer and
	// hold.blocks[to:tailTo] in layers [0, tailLayers); after runs when it
	// ended (a PUSH_FAIL held back until then).
	partial    bool
	to         int
	tailTo     int
	tailLayers int
	after      func()
}

// idle reports whether nothing of the rank's refers to de: no handshake in
// flight, no registration waiting for one, admitted or being written.
func (de *decodeEngine) idle() bool {
	return !de.busy && len(de.parked) == 0 && len(de.rewrites) == 0 && de.refs == 0
}

// sameInstance reports whether the decode rank that sent the registration
// is still the instance it was admitted for, by the payload prefill holds
// now (which must be set).
func (pr *pendingReg) sameInstance() bool {
	de := pr.peer
	rank, ok := de.targets[pr.sender]
	if !ok {
		return false
	}
	cur := &de.payload.Ranks[rank]
	if cur.Incarnation != 0 || pr.incarnation != 0 {
		return cur.Incarnation == pr.incarnation
	}
	// No incarnations (vLLM's protocol): an agent that restarted under
	// the same name publishes other metadata (its new endpoints).
	return bytes.Equal(cur.Metadata, pr.metadata)
}
