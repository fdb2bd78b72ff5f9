package nixl

import (
	"fmt"
	"time"
)

// The native agent must satisfy the Agent contract in every build, so that
// code written against it compiles with and without the `nixl` tag.
var _ Agent = (*NativeAgent)(nil)

// CostMethod says how NIXL estimated a transfer's cost (nixl_cost_t).
type CostMethod int32

// Cost estimation methods, with the values of nixl_cost_t.
const (
	CostAnalyticalBackend CostMethod = 0 // the backend's analytical model (ANALYTICAL_BACKEND)
)

// String returns the NIXL name of the method.
func (m CostMethod) String() string {
	if m == CostAnalyticalBackend {
		return "ANALYTICAL_BACKEND"
	}
	return fmt.Sprintf("nixl_cost_t(%d)", int32(m))
}

// XferCost is NIXL's estimate of how long a transfer request will take
// (nixlAgent::estimateXferCost).
type XferCost struct {
	Duration  time.Duration // expected duration
	ErrMargin time.Duration // expected error of Duration
	Method    CostMethod
}

// XferTelemetry describes a completed transfer (nixl_xfer_telem_t). NIXL
// records it only when the agent was created with Config.CaptureTelemetry
// (or NIXL's telemetry environment variables).
type XferTelemetry struct {
	// Start is when the transfer was posted. NIXL measures it on a
	// monotonic clock; gonixl converts it to wall-clock time when read, so
	// it is accurate to a few microseconds.
	Start        time.Time
	PostDuration time.Duration // time spent inside postXferReq
	XferDuration time.Duration // post to completion, as observed by status polling
	TotalBytes   uint64
	DescCount    uint64 // descriptors after NIXL merged consecutive ones
}
