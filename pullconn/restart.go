package pullconn

import (
	"bytes"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// A prefill engine killed and restarted at the same address (the same
// engine id and side channel, new agents, perhaps under the same names)
// leaves decode with a handshake of the dead instance. Decode finds out in
// two ways:
//
//   - before the READ, in gonixl's protocol: the Params name the
//     incarnation that made them (Params.RemoteIncarnation) and the cached
//     handshake another one. Decode forgets the handshake and handshakes
//     again, once per load; if the engine still publishes another
//     incarnation than the Params name, the load fails with connector.ErrPrefillGone
//     (the Params are the dead instance's: its hold went with it).
//   - when a READ fails to post with the agent's disconnect or not-found
//     error: decode forgets the handshake (the next request handshakes
//     again). In gonixl's protocol, with a prefill that pins, a load none
//     of whose READs is still in flight is retried once on the engine's new
//     incarnation, if a new handshake finds one: it is done only if the new
//     incarnation pins exactly the hold its Params name, which a hold of
//     the dead instance never is (ErrNotHeld), so a retry never gives a
//     done result on wrong bytes. In vLLM's protocol nothing pins a hold: a
//     retry could read the blocks of another request of the new instance,
//     so the load fails with connector.ErrPrefillGone, as vLLM's decode fails it.

// restarts are a decode rank's handling of prefill engines that
// restarted (see above); count counts the handshakes made again for it.
type restarts struct {
	rd    *reader
	count *stats.Counter
}

// maxRetired bounds the incarnations a remote remembers as not its own.
const maxRetired = 64

// sameIncarnation reports whether l, about to be posted on its engine's
// handshake, may read there. When its Params name another incarnation than
// the handshake, l is routed again on a new handshake (the first time) or
// fails with connector.ErrPrefillGone, and sameIncarnation reports false.
func (c *restarts) sameIncarnation(l *load) bool {
	want := l.p.RemoteIncarnation
	if want == 0 || c.rd.vllm || c.holdRanOut(l) {
		return true
	}
	r := l.r
	have := payloadIncarnation(r.setup.payload)
	if have == 0 || have == want {
		return true
	}
	if !l.rehandshook && !r.retired[want] {
		// The handshake may be older than the Params: the engine
		// restarted since decode handshook.
		l.rehandshook = true
		c.count.Inc()
		c.rd.log.Info("pullconn: Params name another incarnation of the prefill engine than its handshake: handshaking again",
			zap.String("request_id", l.id), zap.String("remote_engine_id", r.engineID), zap.String("addr", r.addr))
		c.rd.eng.forget(r)
		c.rd.route(l)
		return false
	}
	// A handshake made after the Params still names another incarnation:
	// the Params are a dead instance's.
	if r.retired == nil || len(r.retired) >= maxRetired {
		r.retired = map[uint64]bool{}
	}
	r.retired[want] = true
	c.rd.fail(l, fmt.Errorf("%w: request %q: prefill engine %q at %s restarted: the request was prefilled by incarnation %#x, the engine now publishes %#x; the old instance's hold of %q is gone",
		errPrefillGone, l.id, r.engineID, r.addr, want, have, l.p.RemoteRequestID))
	return false
}

// holdRanOut reports whether l's hold is past its deadline: post fails it
// with ErrExpired, whichever incarnation holds it.
func (c *restarts) holdRanOut(l *load) bool {
	hold, guarded := c.rd.holds.deadline(l)
	return guarded && !c.rd.now().Before(hold)
}

// agentGone reports whether err is the agent's word that a prefill agent is
// gone (disconnected, closed, or its metadata unloaded).
func agentGone(err error) bool {
	return errors.Is(err, nixl.ErrRemoteDisconnect) || errors.Is(err, nixl.ErrNotFound)
}

// agentMaybeGone reports whether err may hide agentGone's statuses: NIXL's C
// API (the default binding) folds NIXL_ERR_REMOTE_DISCONNECT into
// NIXL_ERR_BACKEND, so a backend error is handled as a possible restart
// (the handshake is made again, which costs a round trip and is always
// safe) but not reported as one.
func agentMaybeGone(err error) bool {
	return errors.Is(err, nixl.ErrBackend)
}

// readFailed ends, or retries, load l whose READ from prefill rank s failed
// (to post, or in flight when inFlight) with err.
func (c *restarts) readFailed(l *load, s int, err error, inFlight bool) {
	c.rd.stats.FailedTransfers.Inc()
	set := l.r.setup
	how := ""
	if inFlight {
		how = " failed in flight"
	}
	failed := fmt.Errorf("%w: request %q: READ from engine %q rank %d (agent %q)%s: %w", ErrTransfer, l.id, l.p.RemoteEngineID, s, set.agents[s], how, err)
	gone := agentGone(err)
	if !gone && !agentMaybeGone(err) {
		c.rd.fail(l, failed)
		return
	}
	c.rd.eng.forget(l.r)
	if !inFlight && c.retryable(l) {
		c.retry(l, failed)
		return
	}
	if !gone {
		c.rd.fail(l, failed)
		return
	}
	c.rd.fail(l, c.goneError(l, s, failed))
}

// goneError says that l's prefill agent is gone, wrapping failed.
func (c *restarts) goneError(l *load, s int, failed error) error {
	why := "the request is not retried"
	if c.rd.vllm {
		why = "in vLLM's protocol the request is not retried (nothing would tell the new instance's blocks from the old ones)"
	}
	return fmt.Errorf("%w: request %q: prefill engine %q rank %d (agent %q) is gone: the engine restarted or shut down, and its hold of %q with it; %s, the next request handshakes again: %w",
		errPrefillGone, l.id, l.p.RemoteEngineID, s, l.r.setup.agents[s], l.p.RemoteRequestID, why, failed)
}

// retryable reports whether l, whose READ failed to post because a prefill
// agent is gone, may be posted again on a new handshake: gonixl's protocol
// with a prefill that pins (so a hold the new instance does not have is
// refused), the first time, no decode staging slot or readiness wait of
// its own, and none of its READs left in flight.
func (c *restarts) retryable(l *load) bool {
	if c.rd.vllm || !l.r.pins() || l.retried || l.slot != nil || l.await != nil || l.completed {
		return false
	}
	for _, x := range l.xfers {
		if x.pending {
			return false
		}
	}
	return c.rd.releaseXfers(l)
}

// retry routes l again, on a new handshake: it is posted if the engine
// publishes another incarnation of the ranks it reads, and fails with
// failed otherwise (retried).
func (c *restarts) retry(l *load, failed error) {
	c.count.Inc()
	c.rd.log.Info("pullconn: prefill agent gone: handshaking again and retrying the load once on a new incarnation",
		zap.String("request_id", l.id), zap.String("remote_engine_id", l.p.RemoteEngineID), zap.Error(failed))
	l.retried, l.rehandshook = true, true
	l.retryFrom, l.retryErr = l.r.setup, failed
	l.xfers = nil
	c.rd.route(l)
}

// retried reports whether l, retried after its READ failed, may be posted
// on its new handshake: only if the engine replaced one of the ranks it
// reads; it fails l otherwise.
func (c *restarts) retried(l *load) bool {
	old := l.retryFrom
	if old == nil || c.holdRanOut(l) {
		return true
	}
	l.retryFrom = nil
	set := l.r.setup
	if len(set.sources) == 0 {
		return true // nothing to read: no READ goes to an agent
	}
	for _, s := range set.sources {
		if replacedRank(old.payload, set.payload, s) {
			return true
		}
	}
	c.rd.fail(l, c.goneError(l, set.sources[0], fmt.Errorf("the engine still publishes the same ranks: %w", l.retryErr)))
	return false
}

// replacedRank reports whether rank s of fresh is another incarnation than
// in old: another agent, incarnation or agent metadata.
func replacedRank(old, fresh *handshake.Payload, s int) bool {
	if s >= len(old.Ranks) || s >= len(fresh.Ranks) || old.TPSize != fresh.TPSize {
		return true
	}
	o, f := &old.Ranks[s], &fresh.Ranks[s]
	switch {
	case o.Agent != f.Agent:
		return true
	case o.Incarnation != 0 || f.Incarnation != 0:
		return o.Incarnation != f.Incarnation
	}
	return !bytes.Equal(o.Metadata, f.Metadata)
}
