package loopback

import (
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/nixl"
)

// GetNotifs returns, in a new map, every notification received since the
// last call, by sender, each sender's in the order they were sent, and
// empties the inbox. It also progresses the fabric. The map is never nil.
func (a *Agent) GetNotifs(_ *nixl.Options) (nixl.Notifs, error) {
	const op = "GetNotifs"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.leave()
	a.f.progress()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.inbox
	a.inbox = nixl.Notifs{}
	return out, nil
}

// GenNotif sends msg to remote, which may be the agent itself. It arrives
// after the model's latency, in order with the sender's other
// notifications to that target. A peer whose connection info is not loaded
// gives nixl.ErrNotFound, as in NIXL; one that is disconnected or closed
// nixl.ErrRemoteDisconnect. DropNotif and DelayNotif rules apply.
func (a *Agent) GenNotif(remote string, msg []byte, _ *nixl.Options) error {
	const op = "GenNotif"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	target := a
	if remote != a.name {
		a.mu.Lock()
		p := a.peers[remote]
		var conn uint64
		if p != nil {
			conn = p.conn
		}
		a.mu.Unlock()
		if conn == 0 {
			return a.errorf(op, nixl.StatusNotFound, "no connection info loaded for %q", remote)
		}
		target = a.f.lookup(remote, conn)
	}
	if why := unreachableReason(a, remote, target); why != "" {
		a.f.stats.disconnects.Add(1)
		return a.errorf(op, nixl.StatusRemoteDisconnect, "%s", why)
	}
	fate := a.f.faults.decideNotif(a.name, remote)
	a.f.stats.notifsSent.Add(1)
	if fate.drop {
		a.f.stats.notifsDropped.Add(1)
		a.f.log.Debug("loopback: injected notification drop", zap.String("from", a.name), zap.String("to", remote))
		return nil
	}
	if fate.delay > 0 {
		a.f.stats.delayed.Add(1)
	}
	a.f.sendNotice(notice{from: a, to: target, msg: append([]byte{}, msg...)}, a.f.clock.Now().Add(a.model.Latency+fate.delay))
	return nil
}
