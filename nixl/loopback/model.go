package loopback

import (
	"fmt"
	"time"
)

// TransferModel says how long a transfer takes on a fabric. A transfer of n
// bytes posted at time t on a link (an initiator and target pair) starts when
// the link has finished the transfers posted on it before, holds the link for
// n/BytesPerSec, and completes Latency after that; its notification arrives
// at completion. Notifications sent with GenNotif take Latency. The zero
// value is the instant model.
type TransferModel struct {
	// Latency is added to every transfer and notification.
	Latency time.Duration
	// BytesPerSec is each link's bandwidth; 0 means unlimited.
	BytesPerSec float64
}

// Instant is the model in which a transfer completes inside PostXferReq,
// which then returns StatusSuccess, and notifications arrive at once. It is
// the fastest, for benchmarks of code above the agent.
func Instant() TransferModel { return TransferModel{} }

// FixedLatency is the model in which every transfer and notification takes d,
// whatever its size.
func FixedLatency(d time.Duration) TransferModel { return TransferModel{Latency: d} }

// Bandwidth is the model of links that move bytesPerSec each, one transfer
// after another, plus latency per transfer.
func Bandwidth(bytesPerSec float64, latency time.Duration) TransferModel {
	return TransferModel{Latency: latency, BytesPerSec: bytesPerSec}
}

// instant reports whether transfers complete inside PostXferReq.
func (m TransferModel) instant() bool { return m.Latency == 0 && m.BytesPerSec == 0 }

// validate rejects models that cannot be timed.
func (m TransferModel) validate() error {
	if m.Latency < 0 {
		return fmt.Errorf("loopback: transfer model latency must not be negative, got %v", m.Latency)
	}
	if m.BytesPerSec < 0 || m.BytesPerSec != m.BytesPerSec {
		return fmt.Errorf("loopback: transfer model bandwidth must be positive or 0 (unlimited), got %v bytes/s", m.BytesPerSec)
	}
	return nil
}

// occupancy is how long n bytes hold a link.
func (m TransferModel) occupancy(n uint64) time.Duration {
	if m.BytesPerSec == 0 {
		return 0
	}
	return time.Duration(float64(n) / m.BytesPerSec * float64(time.Second))
}

// String describes the model, e.g. "bandwidth 1e+09 B/s + latency 1ms".
func (m TransferModel) String() string {
	switch {
	case m.instant():
		return "instant"
	case m.BytesPerSec == 0:
		return fmt.Sprintf("fixed latency %v", m.Latency)
	}
	return fmt.Sprintf("bandwidth %g B/s + latency %v", m.BytesPerSec, m.Latency)
}
