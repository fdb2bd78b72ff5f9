package match

import (
	"math"
	"time"
)

// queueRegistration queues waiting registration r's deadline, and compacts
// the queue when the deadlines of registrations gone outnumber the live
// ones.
func (m *Matcher[R, F]) queueRegistration(r uint32) {
	m.stamp++
	m.regQ.push(due{at: m.regs.items[r].at, a: m.regs.ref(r), b: m.stamp})
	if m.regQ.len() > 2*m.byBase.n[regSide]+compactSlack {
		m.regQ.compact(m.regDue)
	}
}

// queueFinished is queueRegistration for finished entry f.
func (m *Matcher[R, F]) queueFinished(f uint32) {
	m.stamp++
	m.finQ.push(due{at: m.fins.items[f].at, a: m.fins.ref(f), b: m.stamp})
	if m.finQ.len() > 2*m.byBase.n[finSide]+compactSlack {
		m.finQ.compact(m.finDue)
	}
}

// compactSlack keeps small queues from being compacted every few pushes.
const compactSlack = 64

// regDue reports whether queued deadline d still stands for a waiting
// registration (its slot holds the generation d names, with d's deadline).
func (m *Matcher[R, F]) regDue(d due) bool {
	r, ok := m.regs.slotOf(d.a)
	return ok && m.regs.items[r].at == d.at
}

// finDue is regDue for finished entries: a lease extended since has a
// later deadline queued too.
func (m *Matcher[R, F]) finDue(d due) bool {
	f, ok := m.fins.slotOf(d.a)
	return ok && m.fins.items[f].at == d.at
}

// nextRegistration returns the waiting registration whose deadline is the
// earliest, dropping the queue's stale deadlines before it.
func (m *Matcher[R, F]) nextRegistration() (uint32, int64, bool) {
	for {
		d, ok := m.regQ.front()
		if !ok {
			return 0, 0, false
		}
		if r, live := m.regs.slotOf(d.a); live && m.regs.items[r].at == d.at {
			return r, d.at, true
		}
		m.regQ.pop()
	}
}

// nextFinished is nextRegistration for finished requests.
func (m *Matcher[R, F]) nextFinished() (uint32, int64, bool) {
	for {
		d, ok := m.finQ.front()
		if !ok {
			return 0, 0, false
		}
		if f, live := m.fins.slotOf(d.a); live && m.fins.items[f].at == d.at {
			return f, d.at, true
		}
		m.finQ.pop()
	}
}

// Expire removes and returns, each exactly once, the registrations and the
// finished requests whose deadline is at or before now.
func (m *Matcher[R, F]) Expire(now time.Time) ([]ExpiredRegistration[R], []ExpiredFinished[F]) {
	limit := m.line.at(now)
	regs, fins := m.drain(limit, true)
	m.tombs.expire(limit)
	return regs, fins
}

// drain removes and returns the entries whose deadline is at or before
// limit, earliest first, counting them as expired or not.
func (m *Matcher[R, F]) drain(limit int64, expired bool) ([]ExpiredRegistration[R], []ExpiredFinished[F]) {
	var regs []ExpiredRegistration[R]
	var fins []ExpiredFinished[F]
	for {
		r, at, ok := m.nextRegistration()
		if !ok || at > limit {
			break
		}
		m.regQ.pop()
		e := &m.regs.items[r]
		regs = append(regs, ExpiredRegistration[R]{Sender: e.sender, Key: e.key, Reg: e.reg})
		m.dropRegistration(r)
		if expired {
			m.stats.ExpiredRegistrations++
		}
	}
	for {
		f, at, ok := m.nextFinished()
		if !ok || at > limit {
			break
		}
		m.finQ.pop()
		x := &m.fins.items[f]
		fins = append(fins, ExpiredFinished[F]{Key: x.key, Fin: x.fin, Served: x.served})
		m.dropFinished(f)
		if expired {
			m.stats.ExpiredFinished++
		}
	}
	return regs, fins
}

// Next returns the earliest deadline of a pending registration or finished
// request, so the owner can sleep until then. Duplicate-detection memory
// expires too, but nothing waits on it.
func (m *Matcher[R, F]) Next() (time.Time, bool) {
	r, _, rok := m.nextRegistration()
	f, _, fok := m.nextFinished()
	switch {
	case rok && fok:
		rd, fd := m.regs.items[r].deadline, m.fins.items[f].deadline
		if fd.Before(rd) {
			return fd, true
		}
		return rd, true
	case rok:
		return m.regs.items[r].deadline, true
	case fok:
		return m.fins.items[f].deadline, true
	}
	return time.Time{}, false
}

// Flush removes and returns every pending registration and finished
// request, for an owner that shuts down; nothing is counted as expired.
func (m *Matcher[R, F]) Flush() ([]ExpiredRegistration[R], []ExpiredFinished[F]) {
	return m.drain(math.MaxInt64, false)
}
