package pushconn

import "time"

// Clock tells the time for deadlines (registration timeout, lease, write
// timeout), so tests can step it. Polling periods use real time.
type Clock interface {
	Now() time.Time
}
