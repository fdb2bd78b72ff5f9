// Package poller runs the goroutine that keeps a NIXL agent progressing: it
// polls the agent periodically — fast while its owner has work in flight,
// slowly when idle, at once when woken — for the status of the transfers
// its owner asked it to watch and for notifications, reports finished
// transfers to their callbacks, routes each notification to the handler
// registered for its prefix (completions, heartbeats, push registrations,
// failure reports), and then runs its owner's Tick, where the owner expires
// leases. When the agent implements nixl.BatchPoller a round's polling is
// one agent call (one cgo crossing for the native agent), otherwise one
// XferStatus per watched transfer and one GetNotifs. Both connectors build
// their background loops on it.
package poller
