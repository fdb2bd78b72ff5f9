package match

import (
	"slices"
	"time"
)

// model is the matcher's contract written as plainly as it can be: every
// waiting entry in a slice in arrival order, every look-up a scan. The fuzz
// target and TestMatcherAgainstModel hold the Matcher to it.
type model struct {
	cfg   Config
	regs  []*modelReg
	fins  []*modelFin
	tombs []modelTomb
	stats Stats
	stamp int // orders equal deadlines by when they were set
}

type modelReg struct {
	sender   string
	key      Key
	seq      uint64
	fanout   int
	reg      int
	deadline time.Time
	stamp    int
}

type modelFin struct {
	key      Key
	fin      int
	want     int
	served   []string
	deadline time.Time
	stamp    int
}

type modelTomb struct {
	sender string
	key    Key
	seq    uint64
	at     time.Time
}

func (m *model) Register(now time.Time, sender string, key Key, seq uint64, fanout int, reg int) (Match[int, int], Outcome, bool) {
	var mt Match[int, int]
	if key.RequestID == "" || fanout < 1 {
		return mt, 0, false
	}
	old := slices.IndexFunc(m.regs, func(r *modelReg) bool { return r.sender == sender && r.key == key })
	if old >= 0 && !newSeq(m.regs[old].seq, seq) {
		m.stats.Duplicates++
		return mt, Duplicate, true
	}
	if t := slices.IndexFunc(m.tombs, func(t modelTomb) bool { return t.sender == sender && t.key == key }); t >= 0 {
		if !newSeq(m.tombs[t].seq, seq) {
			m.stats.Duplicates++
			return mt, Duplicate, true
		}
		m.tombs = slices.Delete(m.tombs, t, t+1)
	}
	if old >= 0 {
		mt.Superseded, mt.Replaced = true, m.regs[old].reg
		m.regs = slices.Delete(m.regs, old, old+1)
		m.stats.Superseded++
	}
	m.stats.Registrations++
	r := &modelReg{sender: sender, key: key, seq: seq, fanout: fanout, reg: reg}
	if f, kind := m.findFin(r); f != nil {
		p := m.pair(now, r, f, kind, true)
		p.Superseded, p.Replaced = mt.Superseded, mt.Replaced
		return p, Matched, true
	}
	m.stamp++
	r.deadline, r.stamp = now.Add(m.cfg.RegistrationTTL), m.stamp
	m.regs = append(m.regs, r)
	return mt, Pending, true
}

func served(f *modelFin, sender string) bool { return slices.Contains(f.served, sender) }

func (m *model) findFin(r *modelReg) (*modelFin, Kind) {
	if r.key.TransferID != "" {
		for _, f := range m.fins {
			if f.key.TransferID == r.key.TransferID && !served(f, r.sender) {
				return f, ByTransferID
			}
		}
	}
	for _, f := range m.fins {
		if f.key.RequestID == r.key.RequestID && !conflicts(f.key, r.key) && !served(f, r.sender) {
			return f, ByExactID
		}
	}
	for _, f := range m.fins {
		if f.key.RequestID != r.key.RequestID && Base(f.key.RequestID) == Base(r.key.RequestID) &&
			!conflicts(f.key, r.key) && !served(f, r.sender) {
			return f, ByStrippedID
		}
	}
	return nil, 0
}

func (m *model) findReg(f *modelFin) (int, Kind) {
	if f.key.TransferID != "" {
		for i, r := range m.regs {
			if r.key.TransferID == f.key.TransferID && !served(f, r.sender) {
				return i, ByTransferID
			}
		}
	}
	for i, r := range m.regs {
		if r.key.RequestID == f.key.RequestID && !conflicts(f.key, r.key) && !served(f, r.sender) {
			return i, ByExactID
		}
	}
	for i, r := range m.regs {
		if r.key.RequestID != f.key.RequestID && Base(f.key.RequestID) == Base(r.key.RequestID) &&
			!conflicts(f.key, r.key) && !served(f, r.sender) {
			return i, ByStrippedID
		}
	}
	return -1, 0
}

func (m *model) pair(now time.Time, r *modelReg, f *modelFin, kind Kind, stored bool) Match[int, int] {
	switch kind {
	case ByTransferID:
		m.stats.MatchedTransferID++
	case ByExactID:
		m.stats.MatchedExact++
	case ByStrippedID:
		m.stats.MatchedStripped++
	}
	if f.want == 0 {
		f.want = r.fanout
	}
	f.served = append(f.served, r.sender)
	m.tombs = slices.DeleteFunc(m.tombs, func(t modelTomb) bool { return t.sender == r.sender && t.key == r.key })
	m.tombs = append(m.tombs, modelTomb{sender: r.sender, key: r.key, seq: r.seq, at: now.Add(m.cfg.RegistrationTTL)})
	last := len(f.served) >= f.want
	if last && stored {
		m.fins = slices.DeleteFunc(m.fins, func(x *modelFin) bool { return x == f })
	}
	return Match[int, int]{Kind: kind, Sender: r.sender, RegKey: r.key, FinKey: f.key, Reg: r.reg, Fin: f.fin, Last: last}
}

func (m *model) Finish(now time.Time, key Key, fin int) ([]Match[int, int], bool) {
	if key.RequestID == "" {
		return nil, false
	}
	if slices.ContainsFunc(m.fins, func(f *modelFin) bool { return f.key.RequestID == key.RequestID }) {
		return nil, false
	}
	m.stats.Finished++
	f := &modelFin{key: key, fin: fin}
	var out []Match[int, int]
	for f.want == 0 || len(f.served) < f.want {
		i, kind := m.findReg(f)
		if i < 0 {
			break
		}
		r := m.regs[i]
		m.regs = slices.Delete(m.regs, i, i+1)
		out = append(out, m.pair(now, r, f, kind, false))
	}
	if f.want != 0 && len(f.served) >= f.want {
		return out, true
	}
	m.stamp++
	f.deadline, f.stamp = now.Add(m.cfg.FinishedTTL), m.stamp
	m.fins = append(m.fins, f)
	return out, true
}

func byDeadline[E any](xs []E, deadline func(E) (time.Time, int)) []E {
	xs = slices.Clone(xs)
	slices.SortStableFunc(xs, func(a, b E) int {
		da, sa := deadline(a)
		db, sb := deadline(b)
		if c := da.Compare(db); c != 0 {
			return c
		}
		return sa - sb
	})
	return xs
}

func regDeadline(r *modelReg) (time.Time, int) { return r.deadline, r.stamp }
func finDeadline(f *modelFin) (time.Time, int) { return f.deadline, f.stamp }

// take removes and returns, earliest deadline first, the entries due at
// or before limit (all of them when all is set).
func (m *model) take(limit time.Time, all bool) ([]ExpiredRegistration[int], []ExpiredFinished[int]) {
	var regs []ExpiredRegistration[int]
	var fins []ExpiredFinished[int]
	for _, r := range byDeadline(m.regs, regDeadline) {
		if all || !r.deadline.After(limit) {
			regs = append(regs, ExpiredRegistration[int]{Sender: r.sender, Key: r.key, Reg: r.reg})
			m.regs = slices.DeleteFunc(m.regs, func(x *modelReg) bool { return x == r })
		}
	}
	for _, f := range byDeadline(m.fins, finDeadline) {
		if all || !f.deadline.After(limit) {
			fins = append(fins, ExpiredFinished[int]{Key: f.key, Fin: f.fin, Served: len(f.served)})
			m.fins = slices.DeleteFunc(m.fins, func(x *modelFin) bool { return x == f })
		}
	}
	return regs, fins
}

func (m *model) Expire(now time.Time) ([]ExpiredRegistration[int], []ExpiredFinished[int]) {
	regs, fins := m.take(now, false)
	m.stats.ExpiredRegistrations += uint64(len(regs))
	m.stats.ExpiredFinished += uint64(len(fins))
	m.tombs = slices.DeleteFunc(m.tombs, func(t modelTomb) bool { return !t.at.After(now) })
	return regs, fins
}

func (m *model) Flush() ([]ExpiredRegistration[int], []ExpiredFinished[int]) {
	return m.take(time.Time{}, true)
}

func (m *model) Next() (time.Time, bool) {
	var next time.Time
	ok := false
	for _, r := range m.regs {
		if !ok || r.deadline.Before(next) {
			next, ok = r.deadline, true
		}
	}
	for _, f := range m.fins {
		if !ok || f.deadline.Before(next) {
			next, ok = f.deadline, true
		}
	}
	return next, ok
}

func (m *model) Cancel(id string) (int, int, bool) {
	i := slices.IndexFunc(m.fins, func(f *modelFin) bool { return f.key.RequestID == id })
	if i < 0 {
		return 0, 0, false
	}
	f := m.fins[i]
	m.fins = slices.Delete(m.fins, i, i+1)
	return f.fin, len(f.served), true
}

func (m *model) Extend(until time.Time, ids ...string) int {
	n := 0
	for _, id := range ids {
		i := slices.IndexFunc(m.fins, func(f *modelFin) bool { return f.key.RequestID == id })
		if i >= 0 && until.After(m.fins[i].deadline) {
			m.stamp++
			m.fins[i].deadline, m.fins[i].stamp = until, m.stamp
			n++
		}
	}
	return n
}

func (m *model) pendingIndex(sender string, key Key) int {
	return slices.IndexFunc(m.regs, func(r *modelReg) bool { return r.sender == sender && r.key == key })
}

func (m *model) Pending(sender string, key Key) (int, bool) {
	if i := m.pendingIndex(sender, key); i >= 0 {
		return m.regs[i].reg, true
	}
	return 0, false
}

func (m *model) Withdraw(sender string, key Key) (int, bool) {
	i := m.pendingIndex(sender, key)
	if i < 0 {
		return 0, false
	}
	reg := m.regs[i].reg
	m.regs = slices.Delete(m.regs, i, i+1)
	return reg, true
}

func (m *model) Stats() Stats {
	s := m.stats
	s.PendingRegistrations, s.PendingFinished = len(m.regs), len(m.fins)
	return s
}
