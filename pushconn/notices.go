package pushconn

import (
	"errors"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// notices are the writer core's messages to decode ranks other than the
// completions that ride the WRITEs: PUSH_FAIL and PUSH_CANCEL_ACK, sent
// through the core's edge.
type notices struct {
	cfg   *writeConfig
	edge  writeEdge
	mem   *regMemory
	log   *zap.Logger
	stats *stats.Set
	push  *pushCounters
}

// fail sends decode a PUSH_FAIL for its registration reg. Decode takes
// the blocks back on it, so a seq-less registration is remembered (even
// when the PUSH_FAIL cannot be delivered: decode's timeout then does the
// same) and a late copy of it is never admitted.
func (n *notices) fail(sender string, reg *pushwire.Registration, kind pushwire.FailKind, reason string) {
	n.mem.ended(n.edge.now().wall, sender, reg)
	if n.cfg.vllm {
		// vLLM's protocol has no PUSH_FAIL: decode sees the failure at its
		// registration timeout (and keeps its blocks until no WRITE of
		// this rank can land, which none will now).
		n.push.failWithheld.Inc()
		n.log.Debug("pushconn: a registration failed; vLLM's protocol has no PUSH_FAIL to tell decode",
			zap.String("decode_request", reg.RequestID), zap.String("to", sender), zap.String("kind", string(kind)), zap.String("reason", reason))
		return
	}
	msg, err := pushwire.EncodeFailure(&pushwire.Failure{
		RequestID: reg.RequestID, TransferID: reg.TransferID, EngineID: n.cfg.engineID,
		Rank: n.cfg.layout.WorldRank(), Kind: kind, Reason: reason, Seq: reg.Seq,
	})
	if err == nil {
		err = n.edge.notify(sender, msg)
	}
	if err != nil {
		n.push.failUndeliver.Inc()
		n.stats.FailedNotifications.Inc()
		n.log.Warn("pushconn: could not send PUSH_FAIL", zap.String("decode_request", reg.RequestID), zap.String("to", sender), zap.Error(err))
		return
	}
	n.push.failSent.Inc()
}

// ackEnded answers the PUSH_CANCELs that arrived while wr was in flight:
// it has ended, so nothing of it can land any more.
func (n *notices) ackEnded(wr *write) {
	for _, cn := range wr.acks {
		n.ack(wr.reg.peer, wr.reg.sender, cn)
	}
	wr.acks = nil
}

// ack sends decode agent to a PUSH_CANCEL_ACK for cn. When the agent
// cannot be reached yet because de's handshake is in flight, the ack waits
// for the handshake.
func (n *notices) ack(de *decodeEngine, to string, cn *pushwire.Cancel) {
	msg, err := pushwire.EncodeCancelAck(&pushwire.CancelAck{
		RequestID: cn.RequestID, TransferID: cn.TransferID, EngineID: n.cfg.engineID, Rank: n.cfg.layout.WorldRank(), Seq: cn.Seq,
	})
	if err == nil {
		err = n.edge.notify(to, msg)
	}
	if err != nil {
		if de != nil && de.busy && errors.Is(err, nixl.ErrNotFound) {
			de.acks = append(de.acks, ackOrder{to: to, c: cn})
			return
		}
		n.push.cancelAckUndeliver.Inc()
		n.stats.FailedNotifications.Inc()
		n.log.Debug("pushconn: could not send PUSH_CANCEL_ACK", zap.String("decode_request", cn.RequestID), zap.String("to", to), zap.Error(err))
		return
	}
	n.push.cancelAckSent.Inc()
}
