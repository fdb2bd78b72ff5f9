package loopback

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// FaultKind is what a fault rule does to the events it matches.
type FaultKind int

// Fault kinds. Disconnecting an agent is not a rule: see Fabric.Disconnect.
const (
	// DropNotif loses a notification, of a transfer or of GenNotif. The
	// transfer itself still succeeds.
	DropNotif FaultKind = iota + 1
	// DelayNotif holds a notification back for Fault.Delay. Later
	// notifications from the same sender to the same target wait behind it,
	// so per-sender order is kept.
	DelayNotif
	// FailPost makes PostXferReq return an error; nothing is moved.
	FailPost
	// FailInFlight makes a posted transfer end in an error, reported by
	// XferStatus; the first half of its descriptors (rounded down) is
	// written, the rest is not, and no notification is sent.
	FailInFlight
)

// String returns the kind's name.
func (k FaultKind) String() string {
	switch k {
	case DropNotif:
		return "DropNotif"
	case DelayNotif:
		return "DelayNotif"
	case FailPost:
		return "FailPost"
	case FailInFlight:
		return "FailInFlight"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Fault is a rule that injects one kind of fault into the events between two
// agents: transfers posted by From to To, or notifications sent by From to
// To.
type Fault struct {
	Kind FaultKind
	// From and To name the initiator (or notification sender) and the
	// target; "" matches any agent.
	From, To string
	// Probability is the chance that a matching event is hit, drawn from the
	// rule's own generator, seeded from the fabric's seed and the rule's ID.
	// 0 means 1: every matching event.
	Probability float64
	// Count limits how many events the rule hits; 0 means no limit.
	Count int
	// Delay is how long DelayNotif holds a notification back.
	Delay time.Duration
	// Status is the error FailPost and FailInFlight report; 0 means
	// nixl.StatusBackend. It must be a failing status.
	Status nixl.Status
}

// RuleID identifies a fault rule on its fabric. IDs count up from 1 in the
// order rules are added, so a replay that adds the same rules gets the same
// IDs and the same random draws.
type RuleID uint64

type faultRule struct {
	id RuleID
	Fault
	rng      *rand.Rand
	injected int
}

func (r *faultRule) matches(kind FaultKind, from, to string) bool {
	return r.Kind == kind && (r.From == "" || r.From == from) && (r.To == "" || r.To == to) &&
		(r.Count == 0 || r.injected < r.Count)
}

// fire decides whether the rule hits a matching event. A rule that always
// hits draws nothing, so its effect does not depend on the seed.
func (r *faultRule) fire() bool {
	if r.Probability != 0 && r.Probability < 1 && r.rng.Float64() >= r.Probability {
		return false
	}
	r.injected++
	return true
}

// faultTable holds a fabric's rules. Decisions are made when an event is
// posted (PostXferReq, GenNotif), in call order, so the same seed, rules and
// sequence of calls inject the same faults.
type faultTable struct {
	mu     sync.Mutex
	seed   uint64
	nextID RuleID
	rules  []*faultRule
	gone   map[RuleID]int // injected counts of removed rules
}

func (t *faultTable) add(f Fault) (RuleID, error) {
	switch f.Kind {
	case DropNotif, DelayNotif, FailPost, FailInFlight:
	default:
		return 0, fmt.Errorf("loopback: AddFault: unknown fault kind %d", int(f.Kind))
	}
	if f.Probability < 0 || f.Probability > 1 || f.Probability != f.Probability {
		return 0, fmt.Errorf("loopback: AddFault: probability must be in [0, 1], got %v", f.Probability)
	}
	if f.Count < 0 {
		return 0, fmt.Errorf("loopback: AddFault: count must not be negative, got %d", f.Count)
	}
	if f.Kind == DelayNotif && f.Delay <= 0 {
		return 0, fmt.Errorf("loopback: AddFault: DelayNotif needs a positive Delay, got %v", f.Delay)
	}
	if f.Kind != DelayNotif && f.Delay != 0 {
		return 0, fmt.Errorf("loopback: AddFault: Delay is only for DelayNotif, not %v", f.Kind)
	}
	switch f.Kind {
	case FailPost, FailInFlight:
		if f.Status == 0 {
			f.Status = nixl.StatusBackend
		}
		if !f.Status.IsError() {
			return 0, fmt.Errorf("loopback: AddFault: %v needs a failing status, got %v", f.Kind, f.Status)
		}
	default:
		if f.Status != 0 {
			return 0, fmt.Errorf("loopback: AddFault: Status is only for FailPost and FailInFlight, not %v", f.Kind)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextID++
	id := t.nextID
	t.rules = append(t.rules, &faultRule{id: id, Fault: f, rng: rand.New(rand.NewPCG(t.seed, uint64(id)))})
	return id, nil
}

func (t *faultTable) remove(id RuleID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, r := range t.rules {
		if r.id == id {
			if t.gone == nil {
				t.gone = map[RuleID]int{}
			}
			t.gone[id] = r.injected
			t.rules = append(t.rules[:i], t.rules[i+1:]...)
			return true
		}
	}
	return false
}

func (t *faultTable) injected(id RuleID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.rules {
		if r.id == id {
			return r.injected
		}
	}
	return t.gone[id]
}

// first returns the first rule of kind that matches and fires, or nil.
func (t *faultTable) first(kind FaultKind, from, to string) *faultRule {
	for _, r := range t.rules {
		if r.matches(kind, from, to) && r.fire() {
			return r
		}
	}
	return nil
}

// notifFate is what happens to one notification.
type notifFate struct {
	drop  bool
	delay time.Duration
}

// transferFate is what happens to one posted transfer.
type transferFate struct {
	failPost     nixl.Status // 0: the post succeeds
	failInFlight nixl.Status // 0: the transfer is not failed by a rule
	notif        notifFate
}

// decideTransfer draws the faults for a transfer from -> to.
func (t *faultTable) decideTransfer(from, to string, hasNotif bool) transferFate {
	t.mu.Lock()
	defer t.mu.Unlock()
	var fate transferFate
	if r := t.first(FailPost, from, to); r != nil {
		fate.failPost = r.Status
		return fate
	}
	if r := t.first(FailInFlight, from, to); r != nil {
		fate.failInFlight = r.Status
		return fate // a failed transfer sends no notification
	}
	if hasNotif {
		fate.notif = t.decideNotifLocked(from, to)
	}
	return fate
}

// decideNotif draws the faults for a notification from -> to.
func (t *faultTable) decideNotif(from, to string) notifFate {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.decideNotifLocked(from, to)
}

func (t *faultTable) decideNotifLocked(from, to string) notifFate {
	if r := t.first(DropNotif, from, to); r != nil {
		return notifFate{drop: true}
	}
	if r := t.first(DelayNotif, from, to); r != nil {
		return notifFate{delay: r.Delay}
	}
	return notifFate{}
}
