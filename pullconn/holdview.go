package pullconn

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
)

// A decode rank keeps prefill's holds of its loads alive and learns how
// long they last: every HeartbeatInterval it sends "HB:" notifications
// (which extend the holds but say nothing back) and a hold query on the
// side channel, whose answer tells the deadlines it extended them to.

// holdWatch keeps a decode rank's prefill holds alive and knows how long
// they last: per remote request (load.remoteKey), the latest deadline a
// hold query confirmed, on this rank's clock.
type holdWatch struct {
	rd        *reader
	confirmed map[string]time.Time
	margin    time.Duration // Config.ExpiryMargin
}

// deadline returns, on this rank's clock, the last moment at which the
// load's prefill holds are certain to cover its READ: the later of the
// deadline its Params gave (converted with the handshake's clock offset,
// less its uncertainty) and the one a hold query confirmed, less
// Config.ExpiryMargin. guarded is false when prefill gave no deadline.
// The handshake must be done.
func (v *holdWatch) deadline(l *load) (deadline time.Time, guarded bool) {
	base, ok := l.p.expiry()
	if !ok || l.r == nil || l.r.setup == nil {
		return time.Time{}, false
	}
	deadline = base.Add(-l.r.clock.Offset - l.r.clock.Uncertainty)
	if t, ok := v.confirmed[l.remoteKey()]; ok && t.After(deadline) {
		deadline = t
	}
	return deadline.Add(-v.margin), true
}

// record keeps the deadlines hold query a confirmed for the remote
// requests want names.
func (v *holdWatch) record(a holdAnswer, want map[string]bool) {
	for i, id := range a.ids {
		k := a.r.key + "\x00" + id
		d := a.deadlines[i]
		if !want[k] || d.IsZero() {
			continue // not ours any more, or not held: the deadline stays
		}
		if t, ok := v.confirmed[k]; !ok || d.After(t) {
			v.confirmed[k] = d
		}
	}
}

// prune forgets confirmed deadlines of requests this rank no longer reads
// (a KeepAlive that timed out or was aborted).
func (v *holdWatch) prune(want map[string]bool) {
	for k := range v.confirmed {
		if !want[k] {
			delete(v.confirmed, k)
		}
	}
}

// forget drops the deadline of an ended load's remote request.
func (v *holdWatch) forget(l *load) { delete(v.confirmed, l.remoteKey()) }

// holdAnswer is a hold query's outcome.
type holdAnswer struct {
	r         *remote
	ids       []string
	deadlines []time.Time
	clock     handshake.Clock
	err       error
}

// heartbeat sends "HB:" with the remote request ids of every request still
// waiting on each ready engine, to the prefill ranks this rank notifies.
// It reports whether there was anything to send.
func (w *holdWatch) heartbeat() bool {
	ids := map[*remote][]string{}
	var order []*remote // the engines in a fixed order, for the simulation's replays
	add := func(r *remote, id string) {
		if ids[r] == nil {
			order = append(order, r)
		}
		ids[r] = append(ids[r], id)
	}
	for _, set := range [][]*load{w.rd.reading, w.rd.ready} {
		for _, l := range set {
			if !l.ended && l.r.ready {
				add(l.r, l.p.RemoteRequestID)
			}
		}
	}
	for _, p := range w.rd.io.kept() {
		if r, ok := w.rd.eng.remotes[p.RemoteEngineID+"@"+joinHostPort(p.RemoteHost, p.RemotePort)]; ok && r.ready {
			add(r, p.RemoteRequestID)
		}
	}
	if len(order) == 0 {
		return false
	}
	for _, r := range order {
		list := ids[r]
		w.startHoldQuery(r, list)
		msgs, bad := notif.SplitHeartbeats(list, maxHeartbeatLen)
		for _, err := range bad {
			w.rd.log.Debug("pullconn: id cannot go in a heartbeat", zap.Error(err))
		}
		for _, s := range r.setup.notify {
			for _, m := range msgs {
				if err := w.rd.xfer.GenNotif(r.setup.agents[s], m, nil); err != nil {
					w.rd.stats.FailedNotifications.Inc()
					w.rd.log.Debug("pullconn: heartbeat not sent", zap.String("remote_engine_id", r.engineID), zap.Int("prefill_rank", s), zap.Error(err))
				}
			}
		}
	}
	return true
}

// startHoldQuery starts a hold query for ids at r unless one is in flight
// or the engine speaks vLLM's protocol, which has none.
func (w *holdWatch) startHoldQuery(r *remote, ids []string) {
	if r.querying || w.rd.vllm {
		return
	}
	if !w.rd.io.queryHolds(r, slices.Clone(ids)) {
		return
	}
	r.querying = true
}

// applyHoldAnswer records the deadlines a hold query confirmed.
func (w *holdWatch) applyHoldAnswer(a holdAnswer) {
	a.r.querying = false
	if a.err != nil {
		w.rd.failedQueries.Inc()
		w.rd.log.Debug("pullconn: hold query failed", zap.String("remote_engine_id", a.r.engineID), zap.Error(a.err))
		return
	}
	w.rd.holdQueries.Inc()
	if !w.rd.rules.handshakeClock {
		a.r.clock = a.clock
	}
	w.record(a, w.expected())
}

// expected returns the remote requests (load.remoteKey) that this rank's
// live loads and KeepAlives read.
func (w *holdWatch) expected() map[string]bool {
	want := map[string]bool{}
	for _, set := range [][]*load{w.rd.reading, w.rd.ready} {
		for _, l := range set {
			if !l.ended {
				want[l.remoteKey()] = true
			}
		}
	}
	for _, r := range w.rd.eng.remotes {
		for _, l := range r.parked {
			want[l.remoteKey()] = true
		}
	}
	for _, p := range w.rd.io.kept() {
		want[p.RemoteEngineID+"@"+joinHostPort(p.RemoteHost, p.RemotePort)+"\x00"+p.RemoteRequestID] = true
	}
	return want
}
