// Package poller runs the goroutine that keeps a NIXL agent progressing: it
// calls GetNotifs periodically — fast while its owner has work in flight,
// slowly when idle, at once when woken — routes each notification to the
// handler registered for its prefix (completions, heartbeats, push
// registrations, failure reports), and then runs its owner's Tick, where the
// owner polls transfers and expires leases. Both connectors build their
// background loops on it.
package poller
