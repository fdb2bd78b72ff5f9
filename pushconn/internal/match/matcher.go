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

// regEntry is a registration waiting for its request to finish (or, on the
// stack, one being paired on arrival).
type regEntry[R any] struct {
	sender   string
	key      Key
	seq      uint64
	fanout   int
	reg      R
	fp       fingerprint // of identity{sender, key}
	deadline time.Time
	at       int64 // deadline on the matcher's timeline, as queued
}

// finEntry is a finished request waiting for registrations (or, on the
// stack, one being paired on arrival).
type finEntry[F any] struct {
	key      Key
	fin      F
	want     int    // registrations expected; 0 until the first pairs
	served   int    // registrations paired
	first    string // the first one's sender: most requests have one decode rank
	more     []string
	deadline time.Time
	at       int64 // deadline on the matcher's timeline, as queued
}

func (f *finEntry[F]) hasServed(sender string) bool {
	if f.served == 0 {
		return false
	}
	if f.first == sender {
		return true
	}
	for _, s := range f.more {
		if s == sender {
			return true
		}
	}
	return false
}

func (f *finEntry[F]) serve(sender string) {
	if f.served == 0 {
		f.first = sender
	} else {
		f.more = append(f.more, sender)
	}
	f.served++
}

// identity is what makes two registrations the same message.
type identity struct {
	sender string
	key    Key
}

// Matcher pairs registrations with finished blocks. R and F are the
// caller's payloads, returned untouched. It is not safe for concurrent use:
// one goroutine owns it.
//
// Waiting entries live in two slabs and are found through open-addressing
// tables of precomputed hashes (keyIndex, table): pairing, waiting and
// leaving allocate nothing once the slabs and tables have grown to the
// number of entries that wait, and the collector traces the strings in the
// entries but no per-entry object. A pending registration is found by its
// identity through its stripped id: the same look-up that finds the
// finished requests it may pair with.
type Matcher[R, F any] struct {
	cfg Config

	regs          slab[regEntry[R]]
	fins          slab[finEntry[F]]
	byBase, byTID keyIndex // both sides by stripped id, by transfer id
	line          timeline
	tombs         tombs
	regQ, finQ    dueQueue
	stamp         uint64 // orders equal deadlines by when they were queued
	stats         Stats
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
	return &Matcher[R, F]{cfg: cfg}, nil
}

// Config returns the configuration in use, defaults filled in.
func (m *Matcher[R, F]) Config() Config { return m.cfg }

// Stats returns the counters.
func (m *Matcher[R, F]) Stats() Stats {
	s := m.stats
	s.PendingRegistrations = m.byBase.n[regSide]
	s.PendingFinished = m.byBase.n[finSide]
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
	fp := fingerprintOf(identity{sender: sender, key: key})
	touched := m.tombs.touch(fp)
	base := Base(key.RequestID)
	hBase := keyHash(base)
	firstFin, firstReg := m.byBase.lookup(base, hBase)
	old := m.sameRegistration(firstReg, sender, key)
	if old != 0 && !newSeq(m.regs.items[old].seq, seq) {
		m.stats.Duplicates++
		return none, Duplicate, nil
	}
	if t, ok := m.tombs.get(fp, touched); ok {
		if !newSeq(t.seq, seq) {
			m.stats.Duplicates++
			return none, Duplicate, nil
		}
		m.tombs.remove(fp)
	}
	var replaced R
	if old != 0 {
		replaced = m.regs.items[old].reg
		m.dropRegistration(old)
		m.stats.Superseded++
	}
	m.stats.Registrations++
	hTID := uint64(0)
	if key.TransferID != "" {
		hTID = keyHash(key.TransferID)
	}
	// The entry stays on the stack unless it has to wait: most
	// registrations arrive after their request finished.
	e := regEntry[R]{sender: sender, key: key, seq: seq, fanout: fanout, reg: reg, fp: fp}
	out := Pending
	if f, kind := m.findFinished(sender, key, firstFin, hTID); f != 0 {
		none = m.pair(now, &e, &m.fins.items[f], f, kind)
		out = Matched
	} else {
		e.deadline = now.Add(m.cfg.RegistrationTTL)
		e.at = m.line.after(now, m.cfg.RegistrationTTL)
		r := m.regs.alloc()
		m.regs.items[r] = e
		m.byBase.add(regSide, r, base, hBase)
		if key.TransferID != "" {
			m.byTID.add(regSide, r, key.TransferID, hTID)
		}
		m.queueRegistration(r)
	}
	if old != 0 {
		none.Superseded, none.Replaced = true, replaced
	}
	return none, out, nil
}

// sameRegistration returns the slot of the waiting registration from
// sender with key, among those filed under its stripped id from first on,
// or 0.
func (m *Matcher[R, F]) sameRegistration(first uint32, sender string, key Key) uint32 {
	for r := first; r != 0; r = m.byBase.after(regSide, r) {
		if e := &m.regs.items[r]; e.sender == sender && e.key == key {
			return r
		}
	}
	return 0
}

// pending returns the slot of the waiting registration from sender with
// key, or 0.
func (m *Matcher[R, F]) pending(sender string, key Key) uint32 {
	base := Base(key.RequestID)
	_, first := m.byBase.lookup(base, keyHash(base))
	return m.sameRegistration(first, sender, key)
}

// newSeq reports whether a registration with seq is another registration
// than an earlier one of the same identity with seq old: both said their
// seq and they differ.
func newSeq(old, seq uint64) bool { return old != 0 && seq != 0 && old != seq }

// findFinished returns the slot of the finished entry that a registration
// from sender with key pairs with, by the first rule that finds one, or 0.
// first is the oldest finished entry filed under the key's stripped id,
// hTID the transfer id's hash.
func (m *Matcher[R, F]) findFinished(sender string, key Key, first uint32, hTID uint64) (uint32, Kind) {
	if key.TransferID != "" {
		f, _ := m.byTID.lookup(key.TransferID, hTID)
		for ; f != 0; f = m.byTID.after(finSide, f) {
			if !m.fins.items[f].hasServed(sender) {
				return f, ByTransferID
			}
		}
	}
	for f := first; f != 0; f = m.byBase.after(finSide, f) {
		if x := &m.fins.items[f]; x.key.RequestID == key.RequestID && !conflicts(x.key, key) && !x.hasServed(sender) {
			return f, ByExactID
		}
	}
	for f := first; f != 0; f = m.byBase.after(finSide, f) {
		if x := &m.fins.items[f]; x.key.RequestID != key.RequestID && !conflicts(x.key, key) && !x.hasServed(sender) {
			return f, ByStrippedID
		}
	}
	return 0, 0
}

// findRegistration returns the slot of a registration that finished entry
// f pairs with, by the first rule that finds one, or 0. first is the
// oldest registration filed under f's stripped id, hTID its transfer id's
// hash.
func (m *Matcher[R, F]) findRegistration(f *finEntry[F], first uint32, hTID uint64) (uint32, Kind) {
	if f.key.TransferID != "" {
		_, r := m.byTID.lookup(f.key.TransferID, hTID)
		for ; r != 0; r = m.byTID.after(regSide, r) {
			if !f.hasServed(m.regs.items[r].sender) {
				return r, ByTransferID
			}
		}
	}
	for r := first; r != 0; r = m.byBase.after(regSide, r) {
		if e := &m.regs.items[r]; e.key.RequestID == f.key.RequestID && !conflicts(e.key, f.key) && !f.hasServed(e.sender) {
			return r, ByExactID
		}
	}
	for r := first; r != 0; r = m.byBase.after(regSide, r) {
		if e := &m.regs.items[r]; e.key.RequestID != f.key.RequestID && !conflicts(e.key, f.key) && !f.hasServed(e.sender) {
			return r, ByStrippedID
		}
	}
	return 0, 0
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
	hBase := keyHash(base)
	firstFin, firstReg := m.byBase.lookup(base, hBase)
	for f := firstFin; f != 0; f = m.byBase.after(finSide, f) {
		if m.fins.items[f].key.RequestID == key.RequestID {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateFinished, key.RequestID)
		}
	}
	m.stats.Finished++
	hTID := uint64(0)
	if key.TransferID != "" {
		hTID = keyHash(key.TransferID)
	}
	f := finEntry[F]{key: key, fin: fin, deadline: now.Add(m.cfg.FinishedTTL)}
	var out []Match[R, F]
	for f.want == 0 || f.served < f.want {
		r, kind := m.findRegistration(&f, firstReg, hTID)
		if r == 0 {
			break
		}
		e := m.regs.items[r]
		m.dropRegistration(r)
		out = append(out, m.pair(now, &e, &f, 0, kind))
		_, firstReg = m.byBase.lookup(base, hBase)
	}
	if f.want != 0 && f.served >= f.want {
		return out, nil
	}
	f.at = m.line.after(now, m.cfg.FinishedTTL)
	i := m.fins.alloc()
	m.fins.items[i] = f
	m.byBase.add(finSide, i, base, hBase)
	if key.TransferID != "" {
		m.byTID.add(finSide, i, key.TransferID, hTID)
	}
	m.queueFinished(i)
	return out, nil
}

// pair records that registration e is served by f (waiting in slot fi, or
// 0 while it is being added), counts it, leaves a tombstone for
// duplicates, and removes f once it has every registration it expects.
func (m *Matcher[R, F]) pair(now time.Time, e *regEntry[R], f *finEntry[F], fi uint32, kind Kind) Match[R, F] {
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
	f.serve(e.sender)
	m.tombs.put(e.fp, e.seq, m.line.after(now, m.cfg.RegistrationTTL))
	last := f.served >= f.want
	mt := Match[R, F]{Kind: kind, Sender: e.sender, RegKey: e.key, FinKey: f.key, Reg: e.reg, Fin: f.fin, Last: last}
	if last && fi != 0 {
		m.dropFinished(fi)
	}
	return mt
}

func (m *Matcher[R, F]) dropRegistration(r uint32) {
	m.byBase.remove(regSide, r)
	if m.regs.items[r].key.TransferID != "" {
		m.byTID.remove(regSide, r)
	}
	m.regs.release(r)
}

func (m *Matcher[R, F]) dropFinished(f uint32) {
	m.byBase.remove(finSide, f)
	if m.fins.items[f].key.TransferID != "" {
		m.byTID.remove(finSide, f)
	}
	m.fins.release(f)
}

// finishedByID returns the slot of the finished request waiting under
// exactly id, or 0.
func (m *Matcher[R, F]) finishedByID(id string) uint32 {
	base := Base(id)
	f, _ := m.byBase.lookup(base, keyHash(base))
	for ; f != 0; f = m.byBase.after(finSide, f) {
		if m.fins.items[f].key.RequestID == id {
			return f
		}
	}
	return 0
}

// Cancel removes a finished request that still waits for registrations
// (the engine aborted it) and returns its payload and how many
// registrations it had served.
func (m *Matcher[R, F]) Cancel(requestID string) (fin F, served int, ok bool) {
	f := m.finishedByID(requestID)
	if f == 0 {
		return fin, 0, false
	}
	x := &m.fins.items[f]
	fin, served = x.fin, x.served
	m.dropFinished(f)
	return fin, served, true
}

// Extend moves the lease of the finished requests waiting under exactly
// the ids given to until, where that is later than their deadline (vLLM's
// heartbeat: a lease is extended, never shortened); it returns how many it
// extended. Ids that wait for nothing are ignored.
func (m *Matcher[R, F]) Extend(until time.Time, requestIDs ...string) int {
	n := 0
	for _, id := range requestIDs {
		if f := m.finishedByID(id); f != 0 && until.After(m.fins.items[f].deadline) {
			x := &m.fins.items[f]
			x.deadline, x.at = until, m.line.at(until)
			m.queueFinished(f)
			n++
		}
	}
	return n
}

// WaitingFinished reports whether any finished request waits for a
// registration: the writer polls for notifications only then.
func (m *Matcher[R, F]) WaitingFinished() bool { return m.byBase.n[finSide] > 0 }

// PendingRegistrations returns the number of registrations waiting for
// their request to finish, for the owner's cap on them.
func (m *Matcher[R, F]) PendingRegistrations() int { return m.byBase.n[regSide] }

// Pending returns the registration from sender with key that waits for its
// request to finish, leaving it in place.
func (m *Matcher[R, F]) Pending(sender string, key Key) (R, bool) {
	r := m.pending(sender, key)
	if r == 0 {
		var none R
		return none, false
	}
	return m.regs.items[r].reg, true
}

// Withdraw removes the registration from sender with key that waits for
// its request to finish and returns it: decode cancelled it, or the owner
// refuses it after all. A withdrawn registration pairs with nothing, so a
// later one of the same identity is not a Duplicate.
func (m *Matcher[R, F]) Withdraw(sender string, key Key) (R, bool) {
	r := m.pending(sender, key)
	if r == 0 {
		var none R
		return none, false
	}
	reg := m.regs.items[r].reg
	m.dropRegistration(r)
	return reg, true
}

// Peek returns the registrations that a request finishing under key would
// pair with now, leaving them (and everything else) in place: the
// registrations a prefill rank may already write into while the request's
// prefill still computes (progressive push).
func (m *Matcher[R, F]) Peek(key Key) []R {
	if key.RequestID == "" {
		return nil
	}
	base := Base(key.RequestID)
	_, firstReg := m.byBase.lookup(base, keyHash(base))
	hTID := uint64(0)
	if key.TransferID != "" {
		hTID = keyHash(key.TransferID)
	}
	f := finEntry[F]{key: key}
	var out []R
	for f.want == 0 || f.served < f.want {
		r, _ := m.findRegistration(&f, firstReg, hTID)
		if r == 0 {
			break
		}
		e := &m.regs.items[r]
		if f.want == 0 {
			f.want = e.fanout
		}
		f.serve(e.sender)
		out = append(out, e.reg)
	}
	return out
}
