package loopback

import "sync/atomic"

// Counters is a snapshot of what happened on a fabric since it was created,
// so tests can assert exactly what was moved and what was injected.
type Counters struct {
	// Posted counts PostXferReq calls that started a transfer.
	Posted uint64
	// Completed counts transfers that ended in success.
	Completed uint64
	// Failed counts transfers that ended in an error after being posted,
	// whatever the cause (a FailInFlight rule, a disconnect, memory
	// deregistered under them).
	Failed uint64
	// Cancelled counts transfers released before they completed.
	Cancelled uint64
	// Bytes counts bytes copied by transfers, including those of the written
	// part of failed transfers.
	Bytes uint64

	// NotifsSent counts notifications handed to the fabric (with transfers
	// and by GenNotif), before faults.
	NotifsSent uint64
	// NotifsDelivered counts notifications put in a target's inbox.
	NotifsDelivered uint64
	// NotifsLost counts notifications whose sender or target disconnected or
	// closed before delivery.
	NotifsLost uint64

	// PostsFailed counts posts failed by FailPost rules.
	PostsFailed uint64
	// InFlightFailed counts transfers failed by FailInFlight rules.
	InFlightFailed uint64
	// NotifsDropped counts notifications dropped by DropNotif rules.
	NotifsDropped uint64
	// NotifsDelayed counts notifications delayed by DelayNotif rules.
	NotifsDelayed uint64
	// Disconnects counts transfers, posts and GenNotif calls that ended in
	// nixl.ErrRemoteDisconnect because an agent was disconnected or closed.
	Disconnects uint64
}

type counters struct {
	posted, completed, failed, cancelled, bytes         atomic.Uint64
	notifsSent, notifsDelivered, notifsLost             atomic.Uint64
	postsFailed, inFlightFailed, notifsDropped, delayed atomic.Uint64
	disconnects                                         atomic.Uint64
}

func (c *counters) snapshot() Counters {
	return Counters{
		Posted:          c.posted.Load(),
		Completed:       c.completed.Load(),
		Failed:          c.failed.Load(),
		Cancelled:       c.cancelled.Load(),
		Bytes:           c.bytes.Load(),
		NotifsSent:      c.notifsSent.Load(),
		NotifsDelivered: c.notifsDelivered.Load(),
		NotifsLost:      c.notifsLost.Load(),
		PostsFailed:     c.postsFailed.Load(),
		InFlightFailed:  c.inFlightFailed.Load(),
		NotifsDropped:   c.notifsDropped.Load(),
		NotifsDelayed:   c.delayed.Load(),
		Disconnects:     c.disconnects.Load(),
	}
}
