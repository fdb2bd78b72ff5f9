package match

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for Config fields left zero.
const (
	// DefaultRegistrationTTL is how long a registration waits for its
	// request to finish: vLLM's push_registration_timeout default.
	DefaultRegistrationTTL = 480 * time.Second
	// DefaultFinishedTTL is how long finished blocks wait for their
	// registrations before they are released: vLLM's lease default.
	DefaultFinishedTTL = 30 * time.Second
)

// Config sets a Matcher's timeouts.
type Config struct {
	// RegistrationTTL: a registration that has not paired this long after it
	// arrived expires. Zero means DefaultRegistrationTTL.
	RegistrationTTL time.Duration
	// FinishedTTL: finished blocks that have not received every
	// registration they expect this long after they finished expire (their
	// lease). Zero means DefaultFinishedTTL.
	FinishedTTL time.Duration
}

// ErrDuplicateFinished is returned by Finish for a request id that already
// waits in the matcher.
var ErrDuplicateFinished = errors.New("match: request already finished and waiting")

// Outcome is what Register did with a registration.
type Outcome int

// Outcomes of Register.
const (
	Pending   Outcome = iota + 1 // stored until finished blocks arrive
	Matched                      // paired at once
	Duplicate                    // same sender, id and transfer id as one pending or recently paired: dropped
)

// Match is one registration paired with finished blocks.
type Match[R, F any] struct {
	Kind   Kind
	Sender string
	RegKey Key
	FinKey Key
	Reg    R
	Fin    F
	// Last is set on the pair that gave the finished blocks the last
	// registration they expected: they have left the matcher.
	Last bool
	// Superseded is set, with Replaced, when Register took the place of a
	// pending registration of the same sender and key but another non-zero
	// seq (the same request id registered again): Replaced has left the
	// matcher and pairs with nothing. It may come with any Outcome but
	// Duplicate.
	Superseded bool
	Replaced   R
}

// ExpiredRegistration is a registration whose request never finished in time.
type ExpiredRegistration[R any] struct {
	Sender string
	Key    Key
	Reg    R
}

// ExpiredFinished is finished blocks whose lease ran out. Served is the
// number of registrations they had paired with (writes may still use them).
type ExpiredFinished[F any] struct {
	Key    Key
	Fin    F
	Served int
}

// Stats counts what a Matcher has seen.
type Stats struct {
	Registrations        uint64 // Register calls that passed validation
	Finished             uint64 // Finish calls that passed validation
	MatchedTransferID    uint64
	MatchedExact         uint64
	MatchedStripped      uint64
	Duplicates           uint64 // duplicate registrations dropped
	Superseded           uint64 // pending registrations replaced by the same id registered again
	ExpiredRegistrations uint64 // registrations that never paired
	ExpiredFinished      uint64 // finished blocks released by their lease
	PendingRegistrations int    // registrations waiting now
	PendingFinished      int    // finished requests waiting now
}

type regEntry[R any] struct {
	sender   string
	key      Key
	seq      uint64
	base     string
	fanout   int
	reg      R
	fp       fingerprint // of identity{sender, key}
	byID     bool        // indexed in pendingIDs under fp
	deadline time.Time
	at       int64 // deadline on the matcher's timeline, as queued
	gone     bool
}

func (e *regEntry[R]) queuedAt(at int64) bool { return !e.gone && e.at == at }
func (e *regEntry[R]) deadlineAt() time.Time  { return e.deadline }

type finEntry[F any] struct {
	key      Key
	base     string
	fin      F
	want     int // registrations expected; 0 until the first pairs
	served   []string
	one      [1]string // served's first backing array: most requests have one decode rank
	deadline time.Time
	at       int64 // deadline on the matcher's timeline, as queued
	indexed  bool  // waiting in the indexes (not paired on arrival)
	gone     bool
}

func (e *finEntry[F]) queuedAt(at int64) bool { return !e.gone && e.at == at }
func (e *finEntry[F]) deadlineAt() time.Time  { return e.deadline }

func (e *finEntry[F]) hasServed(sender string) bool {
	for _, s := range e.served {
		if s == sender {
			return true
		}
	}
	return false
}

// identity is what makes two registrations the same message.
type identity struct {
	sender string
	key    Key
}

// Matcher pairs registrations with finished blocks. R and F are the
// caller's payloads, returned untouched. It is not safe for concurrent use:
// one goroutine owns it.
type Matcher[R, F any] struct {
	cfg Config

	regs       keyIndex[*regEntry[R]]
	fins       keyIndex[*finEntry[F]]
	pendingIDs map[fingerprint]*regEntry[R] // by identity's fingerprint, the identity checked on a hit
	line       timeline
	tombs      tombs

	regQ deadlines[*regEntry[R]]
	finQ deadlines[*finEntry[F]]

	stats Stats
}

// New returns an empty Matcher; zero Config fields take their defaults.
func New[R, F any](cfg Config) (*Matcher[R, F], error) {
	if cfg.RegistrationTTL < 0 || cfg.FinishedTTL < 0 {
		return nil, fmt.Errorf("match: timeouts must not be negative (RegistrationTTL %v, FinishedTTL %v)",
			cfg.RegistrationTTL, cfg.FinishedTTL)
	}
	if cfg.RegistrationTTL == 0 {
		cfg.RegistrationTTL = DefaultRegistrationTTL
	}
	if cfg.FinishedTTL == 0 {
		cfg.FinishedTTL = DefaultFinishedTTL
	}
	return &Matcher[R, F]{
		cfg:        cfg,
		regs:       newKeyIndex[*regEntry[R]](),
		fins:       newKeyIndex[*finEntry[F]](),
		pendingIDs: map[fingerprint]*regEntry[R]{},
		tombs:      newTombs(),
	}, nil
}

// Config returns the configuration in use, defaults filled in.
func (m *Matcher[R, F]) Config() Config { return m.cfg }

// Stats returns the counters.
func (m *Matcher[R, F]) Stats() Stats {
	s := m.stats
	s.PendingRegistrations = m.regs.n
	s.PendingFinished = m.fins.n
	return s
}

// Register adds decode's registration from sender (the decode rank's agent).
// fanout is the number of decode ranks the finished blocks are written to,
// so the number of registrations they expect; only the first pairing
// registration's fanout counts. A registration identical (sender, request id,
// transfer id) to one pending or paired within the registration TTL is a
// Duplicate and changes nothing but a counter, unless both carry a non-zero
// seq and the seqs differ: then it is the same request registered again,
// which replaces a pending one (Match.Superseded) and is not held against
// one already paired. now is when the
// registration was received, which may be before the previous call's now
// (it waited for a handshake): its deadline counts from then.
func (m *Matcher[R, F]) Register(now time.Time, sender string, key Key, seq uint64, fanout int, reg R) (Match[R, F], Outcome, error) {
	var none Match[R, F]
	if key.RequestID == "" {
		return none, 0, errors.New("match: registration has an empty request id")
	}
	if fanout < 1 {
		return none, 0, fmt.Errorf("match: registration fanout must be at least 1, got %d", fanout)
	}
	id := identity{sender: sender, key: key}
	fp := fingerprintOf(id)
	var superseded *regEntry[R]
	if old := m.pending(fp, id); old != nil {
		if !newSeq(old.seq, seq) {
			m.stats.Duplicates++
			return none, Duplicate, nil
		}
		superseded = old
	}
	if t, ok := m.tombs.get(fp); ok {
		if !newSeq(t.seq, seq) {
			m.stats.Duplicates++
			return none, Duplicate, nil
		}
		m.tombs.remove(fp)
	}
	if superseded != nil {
		m.dropRegistration(superseded)
		m.stats.Superseded++
	}
	m.stats.Registrations++
	// The entry stays on the stack unless it has to wait: most
	// registrations arrive after their request finished.
	e := regEntry[R]{sender: sender, key: key, seq: seq, base: Base(key.RequestID), fanout: fanout, reg: reg, fp: fp}
	out := Pending
	if f, kind := m.findFinished(e.sender, e.key, e.base); f != nil {
		none = m.pair(now, &e, f, kind)
		out = Matched
	} else {
		p := new(regEntry[R])
		*p = e
		p.deadline = now.Add(m.cfg.RegistrationTTL)
		if _, taken := m.pendingIDs[fp]; !taken {
			m.pendingIDs[fp] = p
			p.byID = true
		}
		m.regs.add(key, p.base, p)
		p.at = m.line.at(p.deadline)
		m.regQ.push(p.at, p)
	}
	if superseded != nil {
		none.Superseded, none.Replaced = true, superseded.reg
	}
	return none, out, nil
}

// pending returns the waiting registration of identity id, whose
// fingerprint is fp. Another identity under the same fingerprint (a chance
// of 2^-128) is not it: that one is then found only through the indexes.
func (m *Matcher[R, F]) pending(fp fingerprint, id identity) *regEntry[R] {
	e, ok := m.pendingIDs[fp]
	if !ok || e.sender != id.sender || e.key != id.key {
		return nil
	}
	return e
}

// newSeq reports whether a registration with seq is another registration
// than an earlier one of the same identity with seq old: both said their
// seq and they differ.
func newSeq(old, seq uint64) bool { return old != 0 && seq != 0 && old != seq }

// findFinished returns the finished entry that a registration from sender
// with key and stripped id base pairs with, by the first rule that finds one.
func (m *Matcher[R, F]) findFinished(sender string, key Key, base string) (*finEntry[F], Kind) {
	return m.fins.find(key, base, finKey[F], func(f *finEntry[F]) bool { return !f.hasServed(sender) })
}

// Finish adds a finished request's blocks and returns the registrations they
// pair with at once: none, or up to their fanout from distinct senders.
// Finishing a request id that is already waiting is an error and changes
// nothing. now is when the request finished; its lease counts from then.
func (m *Matcher[R, F]) Finish(now time.Time, key Key, fin F) ([]Match[R, F], error) {
	if key.RequestID == "" {
		return nil, errors.New("match: finished request has an empty id")
	}
	base := Base(key.RequestID)
	// One lookup serves the duplicate check and, below, the insertion:
	// pairing changes registrations only, so the count still holds then.
	var buf [1]*finEntry[F]
	same := m.fins.byBase.list(base, &buf)
	for _, x := range same {
		if x.key.RequestID == key.RequestID {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateFinished, key.RequestID)
		}
	}
	sameBase := len(same)
	m.stats.Finished++
	f := &finEntry[F]{key: key, base: base, fin: fin, deadline: now.Add(m.cfg.FinishedTTL)}
	f.served = f.one[:0]
	var out []Match[R, F]
	for f.want == 0 || len(f.served) < f.want {
		e, kind := m.findRegistration(f)
		if e == nil {
			break
		}
		m.dropRegistration(e)
		out = append(out, m.pair(now, e, f, kind))
	}
	if f.want != 0 && len(f.served) >= f.want {
		return out, nil
	}
	m.fins.addCounted(key, f.base, f, sameBase)
	f.indexed = true
	f.at = m.line.at(f.deadline)
	m.finQ.push(f.at, f)
	return out, nil
}

// findRegistration returns a registration that finished entry f pairs
// with, by the first rule that finds one.
func (m *Matcher[R, F]) findRegistration(f *finEntry[F]) (*regEntry[R], Kind) {
	return m.regs.find(f.key, f.base, regKey[R], func(e *regEntry[R]) bool { return !f.hasServed(e.sender) })
}

func finKey[F any](f *finEntry[F]) Key { return f.key }
func regKey[R any](e *regEntry[R]) Key { return e.key }

// pair records that registration e is served by f, counts it, leaves a
// tombstone for duplicates, and removes f once it has every registration it
// expects.
func (m *Matcher[R, F]) pair(now time.Time, e *regEntry[R], f *finEntry[F], kind Kind) Match[R, F] {
	switch kind {
	case ByTransferID:
		m.stats.MatchedTransferID++
	case ByExactID:
		m.stats.MatchedExact++
	case ByStrippedID:
		m.stats.MatchedStripped++
	}
	if f.want == 0 {
		f.want = e.fanout
	}
	f.served = append(f.served, e.sender)
	m.tombs.put(e.fp, e.seq, m.line.at(now.Add(m.cfg.RegistrationTTL)))
	last := len(f.served) >= f.want
	if last && f.indexed {
		m.dropFinished(f)
	}
	return Match[R, F]{Kind: kind, Sender: e.sender, RegKey: e.key, FinKey: f.key, Reg: e.reg, Fin: f.fin, Last: last}
}

func (m *Matcher[R, F]) dropRegistration(e *regEntry[R]) {
	e.gone = true
	if e.byID {
		delete(m.pendingIDs, e.fp)
		e.byID = false
	}
	m.regs.remove(e.key, e.base, e)
}

func (m *Matcher[R, F]) dropFinished(f *finEntry[F]) {
	f.gone = true
	f.indexed = false
	m.fins.remove(f.key, f.base, f)
}

// Cancel removes a finished request that still waits for registrations
// (the engine aborted it) and returns its payload and how many
// registrations it had served.
func (m *Matcher[R, F]) Cancel(requestID string) (fin F, served int, ok bool) {
	f, ok := m.fins.byID(requestID, finKey[F])
	if !ok {
		return fin, 0, false
	}
	m.dropFinished(f)
	return f.fin, len(f.served), true
}

// Extend moves the lease of the finished requests waiting under exactly
// the ids given to until, where that is later than their deadline (vLLM's
// heartbeat: a lease is extended, never shortened); it returns how many it
// extended. Ids that wait for nothing are ignored.
func (m *Matcher[R, F]) Extend(until time.Time, requestIDs ...string) int {
	n := 0
	for _, id := range requestIDs {
		if f, ok := m.fins.byID(id, finKey[F]); ok && until.After(f.deadline) {
			f.deadline, f.at = until, m.line.at(until)
			m.finQ.push(f.at, f)
			n++
		}
	}
	return n
}

// Expire removes and returns, each exactly once, the registrations and the
// finished requests whose deadline is at or before now.
func (m *Matcher[R, F]) Expire(now time.Time) ([]ExpiredRegistration[R], []ExpiredFinished[F]) {
	var regs []ExpiredRegistration[R]
	var fins []ExpiredFinished[F]
	limit := m.line.at(now)
	for {
		e, at, ok := m.regQ.front()
		if !ok || at > limit {
			break
		}
		m.regQ.pop()
		m.dropRegistration(e)
		m.stats.ExpiredRegistrations++
		regs = append(regs, ExpiredRegistration[R]{Sender: e.sender, Key: e.key, Reg: e.reg})
	}
	for {
		f, at, ok := m.finQ.front()
		if !ok || at > limit {
			break
		}
		m.finQ.pop()
		m.dropFinished(f)
		m.stats.ExpiredFinished++
		fins = append(fins, ExpiredFinished[F]{Key: f.key, Fin: f.fin, Served: len(f.served)})
	}
	m.tombs.expire(limit)
	return regs, fins
}

// Next returns the earliest deadline of a pending registration or finished
// request, so the owner can sleep until then. Duplicate-detection memory
// expires too, but nothing waits on it.
func (m *Matcher[R, F]) Next() (time.Time, bool) {
	r, rok := m.regQ.next()
	f, fok := m.finQ.next()
	switch {
	case rok && fok:
		if f.Before(r) {
			return f, true
		}
		return r, true
	case rok:
		return r, true
	case fok:
		return f, true
	}
	return time.Time{}, false
}

// WaitingFinished reports whether any finished request waits for a
// registration: the writer polls for notifications only then.
func (m *Matcher[R, F]) WaitingFinished() bool { return m.fins.n > 0 }

// Flush removes and returns every pending registration and finished
// request, for an owner that shuts down; nothing is counted as expired.
func (m *Matcher[R, F]) Flush() ([]ExpiredRegistration[R], []ExpiredFinished[F]) {
	var regs []ExpiredRegistration[R]
	var fins []ExpiredFinished[F]
	for {
		e, _, ok := m.regQ.front()
		if !ok {
			break
		}
		m.regQ.pop()
		m.dropRegistration(e)
		regs = append(regs, ExpiredRegistration[R]{Sender: e.sender, Key: e.key, Reg: e.reg})
	}
	for {
		f, _, ok := m.finQ.front()
		if !ok {
			break
		}
		m.finQ.pop()
		m.dropFinished(f)
		fins = append(fins, ExpiredFinished[F]{Key: f.key, Fin: f.fin, Served: len(f.served)})
	}
	return regs, fins
}

// PendingRegistrations returns the number of registrations waiting for
// their request to finish, for the owner's cap on them.
func (m *Matcher[R, F]) PendingRegistrations() int { return m.regs.n }

// Pending returns the registration from sender with key that waits for its
// request to finish, leaving it in place.
func (m *Matcher[R, F]) Pending(sender string, key Key) (R, bool) {
	id := identity{sender: sender, key: key}
	e := m.pending(fingerprintOf(id), id)
	if e == nil {
		var none R
		return none, false
	}
	return e.reg, true
}

// Withdraw removes the registration from sender with key that waits for
// its request to finish and returns it: decode cancelled it, or the owner
// refuses it after all. A withdrawn registration pairs with nothing, so a
// later one of the same identity is not a Duplicate.
func (m *Matcher[R, F]) Withdraw(sender string, key Key) (R, bool) {
	id := identity{sender: sender, key: key}
	e := m.pending(fingerprintOf(id), id)
	if e == nil {
		var none R
		return none, false
	}
	m.dropRegistration(e)
	return e.reg, true
}
