package match

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

func newM(t testing.TB) *Matcher[string, string] {
	t.Helper()
	m, err := New[string, string](Config{RegistrationTTL: 480 * time.Second, FinishedTTL: 30 * time.Second})
	require.NoError(t, err)
	return m
}

func TestBase(t *testing.T) {
	for in, want := range map[string]string{
		"cmpl-7f3a9c21-0-1a2b3c4d": "cmpl-7f3a9c21-0",
		"cmpl-abc-1A2B3C4D":        "cmpl-abc",
		"cmpl-abc-1a2b3c4":         "cmpl-abc-1a2b3c4",  // 7 digits
		"cmpl-abc-1a2b3c4g":        "cmpl-abc-1a2b3c4g", // not hex
		"cmpl-abc_1a2b3c4d":        "cmpl-abc_1a2b3c4d", // no dash
		"-1a2b3c4d":                "",
		"abc":                      "abc",
		"":                         "",
	} {
		require.Equal(t, want, Base(in), in)
	}
}

func TestRegisterThenFinish(t *testing.T) {
	m := newM(t)
	_, out, err := m.Register(t0, "d0", Key{RequestID: "r1"}, 0, 1, "reg")
	require.NoError(t, err)
	require.Equal(t, Pending, out)
	got, err := m.Finish(t0.Add(time.Second), Key{RequestID: "r1"}, "fin")
	require.NoError(t, err)
	require.Equal(t, []Match[string, string]{{Kind: ByExactID, Sender: "d0", RegKey: Key{RequestID: "r1"},
		FinKey: Key{RequestID: "r1"}, Reg: "reg", Fin: "fin", Last: true}}, got)
	s := m.Stats()
	require.Equal(t, uint64(1), s.MatchedExact)
	require.Zero(t, s.PendingRegistrations)
	require.Zero(t, s.PendingFinished)
	_, ok := m.Next()
	require.False(t, ok, "nothing waits")
}

func TestFinishThenRegister(t *testing.T) {
	m := newM(t)
	got, err := m.Finish(t0, Key{RequestID: "r1"}, "fin")
	require.NoError(t, err)
	require.Empty(t, got)
	require.True(t, m.WaitingFinished())
	mt, out, err := m.Register(t0, "d0", Key{RequestID: "r1"}, 0, 1, "reg")
	require.NoError(t, err)
	require.Equal(t, Matched, out)
	require.Equal(t, "fin", mt.Fin)
	require.True(t, mt.Last)
	require.False(t, m.WaitingFinished())
	regs, fins := m.Expire(t0.Add(time.Hour))
	require.Empty(t, regs)
	require.Empty(t, fins, "a paired request never expires")
}

func TestStrippedMatch(t *testing.T) {
	m := newM(t)
	// Decode and prefill each appended their own suffix to the proxy's id.
	_, out, err := m.Register(t0, "d0", Key{RequestID: "cmpl-42-0-DEADBEEF"}, 0, 1, "reg")
	require.NoError(t, err)
	require.Equal(t, Pending, out)
	got, err := m.Finish(t0, Key{RequestID: "cmpl-42-0-0badf00d"}, "fin")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, ByStrippedID, got[0].Kind)

	// Only one side carries a suffix.
	_, err = m.Finish(t0, Key{RequestID: "cmpl-43-12345678"}, "fin2")
	require.NoError(t, err)
	mt, out, err := m.Register(t0, "d0", Key{RequestID: "cmpl-43"}, 0, 1, "reg2")
	require.NoError(t, err)
	require.Equal(t, Matched, out)
	require.Equal(t, ByStrippedID, mt.Kind)
	require.Equal(t, uint64(2), m.Stats().MatchedStripped)

	// Different bases never pair.
	_, err = m.Finish(t0, Key{RequestID: "cmpl-44-12345678"}, "fin3")
	require.NoError(t, err)
	_, out, err = m.Register(t0, "d0", Key{RequestID: "cmpl-45-12345678"}, 0, 1, "reg3")
	require.NoError(t, err)
	require.Equal(t, Pending, out)
}

func TestTransferIDMatch(t *testing.T) {
	m := newM(t)
	_, _, err := m.Register(t0, "d0", Key{RequestID: "decode-side", TransferID: "x1"}, 0, 1, "reg")
	require.NoError(t, err)
	got, err := m.Finish(t0, Key{RequestID: "prefill-side", TransferID: "x1"}, "fin")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, ByTransferID, got[0].Kind)
	require.Equal(t, uint64(1), m.Stats().MatchedTransferID)
}

func TestTransferIDConflictBlocksIDMatch(t *testing.T) {
	m := newM(t)
	_, _, err := m.Register(t0, "d0", Key{RequestID: "r1", TransferID: "x1"}, 0, 1, "reg")
	require.NoError(t, err)
	got, err := m.Finish(t0, Key{RequestID: "r1", TransferID: "x2"}, "fin")
	require.NoError(t, err)
	require.Empty(t, got, "both carry transfer ids and they differ")
	// One side without a transfer id falls back to request ids.
	_, err = m.Finish(t0, Key{RequestID: "r2"}, "fin2")
	require.NoError(t, err)
	mt, out, err := m.Register(t0, "d0", Key{RequestID: "r2", TransferID: "x3"}, 0, 1, "reg2")
	require.NoError(t, err)
	require.Equal(t, Matched, out)
	require.Equal(t, ByExactID, mt.Kind)
}

func TestRulePrecedence(t *testing.T) {
	m := newM(t)
	// Three waiting finished requests, each pairable with the registration
	// by a different rule; the transfer id wins, then the exact id.
	_, err := m.Finish(t0, Key{RequestID: "a-12345678"}, "stripped")
	require.NoError(t, err)
	_, err = m.Finish(t0, Key{RequestID: "a-87654321"}, "exact")
	require.NoError(t, err)
	_, err = m.Finish(t0, Key{RequestID: "zzz", TransferID: "t"}, "tid")
	require.NoError(t, err)
	for _, want := range []struct {
		fin  string
		kind Kind
	}{{"tid", ByTransferID}, {"exact", ByExactID}, {"stripped", ByStrippedID}} {
		mt, out, err := m.Register(t0, "d"+want.fin, Key{RequestID: "a-87654321", TransferID: "t"}, 0, 1, "r")
		require.NoError(t, err)
		require.Equal(t, Matched, out)
		require.Equal(t, want.fin, mt.Fin)
		require.Equal(t, want.kind, mt.Kind)
	}
}

func TestDuplicateRegistration(t *testing.T) {
	m := newM(t)
	k := Key{RequestID: "r1"}
	_, out, _ := m.Register(t0, "d0", k, 0, 1, "first")
	require.Equal(t, Pending, out)
	_, out, _ = m.Register(t0, "d0", k, 0, 1, "second")
	require.Equal(t, Duplicate, out, "duplicate while pending")
	got, err := m.Finish(t0, k, "fin")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "first", got[0].Reg)
	_, out, _ = m.Register(t0.Add(time.Minute), "d0", k, 0, 1, "third")
	require.Equal(t, Duplicate, out, "duplicate after pairing: no second write")
	require.Equal(t, uint64(2), m.Stats().Duplicates)
	require.Equal(t, uint64(1), m.Stats().Registrations)

	// The duplicate memory lasts one registration TTL.
	m.Expire(t0.Add(481 * time.Second))
	_, out, _ = m.Register(t0.Add(481*time.Second), "d0", k, 0, 1, "late")
	require.Equal(t, Pending, out)
}

func TestFanoutServesEachSenderOnce(t *testing.T) {
	m := newM(t)
	_, err := m.Finish(t0, Key{RequestID: "r"}, "fin")
	require.NoError(t, err)
	mt, out, _ := m.Register(t0, "d0", Key{RequestID: "r"}, 0, 2, "a")
	require.Equal(t, Matched, out)
	require.False(t, mt.Last)
	// The same sender under another id variant may not take a second write.
	_, out, _ = m.Register(t0, "d0", Key{RequestID: "r-0000aaaa"}, 0, 2, "b")
	require.Equal(t, Pending, out)
	mt, out, _ = m.Register(t0, "d1", Key{RequestID: "r"}, 0, 2, "c")
	require.Equal(t, Matched, out)
	require.True(t, mt.Last)
	require.False(t, m.WaitingFinished())

	// Finish pairs with up to fanout registrations of distinct senders at once.
	for _, s := range []string{"d0", "d0x", "d1"} {
		_, _, err := m.Register(t0, s, Key{RequestID: "q"}, 0, 2, s)
		require.NoError(t, err)
	}
	got, err := m.Finish(t0, Key{RequestID: "q"}, "fin2")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "d0", got[0].Sender)
	require.Equal(t, "d0x", got[1].Sender)
	require.True(t, got[1].Last)
}

func TestRegistrationExpiresOnce(t *testing.T) {
	m := newM(t)
	_, _, _ = m.Register(t0, "d0", Key{RequestID: "never"}, 0, 1, "reg")
	next, ok := m.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(480*time.Second), next)
	regs, fins := m.Expire(t0.Add(479 * time.Second))
	require.Empty(t, regs)
	require.Empty(t, fins)
	regs, _ = m.Expire(t0.Add(480 * time.Second))
	require.Equal(t, []ExpiredRegistration[string]{{Sender: "d0", Key: Key{RequestID: "never"}, Reg: "reg"}}, regs)
	regs, _ = m.Expire(t0.Add(time.Hour))
	require.Empty(t, regs, "reported once")
	require.Equal(t, uint64(1), m.Stats().ExpiredRegistrations)
	got, err := m.Finish(t0.Add(time.Hour), Key{RequestID: "never"}, "fin")
	require.NoError(t, err)
	require.Empty(t, got, "an expired registration cannot pair")
}

func TestFinishedLeaseExpiresOnce(t *testing.T) {
	m := newM(t)
	_, _ = m.Finish(t0, Key{RequestID: "lonely"}, "fin")
	_, _ = m.Finish(t0, Key{RequestID: "half"}, "fin2")
	_, _, _ = m.Register(t0, "d0", Key{RequestID: "half"}, 0, 2, "reg")
	_, fins := m.Expire(t0.Add(30 * time.Second))
	require.Equal(t, []ExpiredFinished[string]{
		{Key: Key{RequestID: "lonely"}, Fin: "fin", Served: 0},
		{Key: Key{RequestID: "half"}, Fin: "fin2", Served: 1},
	}, fins)
	_, fins = m.Expire(t0.Add(time.Hour))
	require.Empty(t, fins)
	require.Equal(t, uint64(2), m.Stats().ExpiredFinished)
	_, out, _ := m.Register(t0.Add(31*time.Second), "d1", Key{RequestID: "lonely"}, 0, 1, "late")
	require.Equal(t, Pending, out, "late registration does not pair with released blocks")
}

func TestDuplicateFinishRefused(t *testing.T) {
	m := newM(t)
	_, err := m.Finish(t0, Key{RequestID: "r"}, "a")
	require.NoError(t, err)
	_, err = m.Finish(t0, Key{RequestID: "r"}, "b")
	require.ErrorIs(t, err, ErrDuplicateFinished)
	mt, _, _ := m.Register(t0, "d", Key{RequestID: "r"}, 0, 1, "reg")
	require.Equal(t, "a", mt.Fin, "the first finish is kept")
	require.Equal(t, uint64(1), m.Stats().Finished)
}

func TestBadInputChangesNothing(t *testing.T) {
	m := newM(t)
	_, _, err := m.Register(t0, "d", Key{}, 0, 1, "")
	require.ErrorContains(t, err, "empty request id")
	_, _, err = m.Register(t0, "d", Key{RequestID: "r"}, 0, 0, "")
	require.ErrorContains(t, err, "fanout must be at least 1, got 0")
	_, err = m.Finish(t0, Key{}, "")
	require.ErrorContains(t, err, "empty id")
	require.Equal(t, Stats{}, m.Stats())
	_, err = New[int, int](Config{FinishedTTL: -1})
	require.ErrorContains(t, err, "must not be negative")
}

func TestCancel(t *testing.T) {
	m := newM(t)
	_, _ = m.Finish(t0, Key{RequestID: "r"}, "fin")
	fin, served, ok := m.Cancel("r")
	require.True(t, ok)
	require.Equal(t, "fin", fin)
	require.Zero(t, served)
	_, _, ok = m.Cancel("r")
	require.False(t, ok)
	_, fins := m.Expire(t0.Add(time.Hour))
	require.Empty(t, fins, "a cancelled request does not expire later")
}

// TestRandomOrderEveryRequestEndsOnce interleaves registrations, finishes
// and duplicates of many requests in random order, with suffixes and
// transfer ids mixed in, and checks that every request pairs exactly once.
func TestRandomOrderEveryRequestEndsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newM(t)
	const n = 5000
	type ev struct {
		reg bool
		i   int
	}
	var evs []ev
	for i := range n {
		evs = append(evs, ev{true, i}, ev{false, i})
		if i%7 == 0 {
			evs = append(evs, ev{true, i}) // duplicate
		}
	}
	rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
	keys := func(i int) (Key, Key) {
		switch i % 3 {
		case 0:
			return Key{RequestID: fmt.Sprintf("r%d", i)}, Key{RequestID: fmt.Sprintf("r%d", i)}
		case 1:
			return Key{RequestID: fmt.Sprintf("r%d-%08x", i, i)}, Key{RequestID: fmt.Sprintf("r%d-%08X", i, i+1)}
		}
		return Key{RequestID: fmt.Sprintf("d%d", i), TransferID: fmt.Sprint(i)}, Key{RequestID: fmt.Sprintf("p%d", i), TransferID: fmt.Sprint(i)}
	}
	paired := make([]int, n)
	now := t0
	for _, e := range evs {
		now = now.Add(time.Millisecond)
		rk, fk := keys(e.i)
		if e.reg {
			mt, out, err := m.Register(now, "d0", rk, 0, 1, rk.RequestID)
			require.NoError(t, err)
			if out == Matched {
				require.Equal(t, fk, mt.FinKey)
				paired[e.i]++
			}
			continue
		}
		got, err := m.Finish(now, fk, fk.RequestID)
		require.NoError(t, err)
		for _, mt := range got {
			require.Equal(t, rk, mt.RegKey)
			paired[e.i]++
		}
	}
	for i, c := range paired {
		require.Equal(t, 1, c, "request %d", i)
	}
	s := m.Stats()
	require.Equal(t, uint64(n), s.MatchedExact+s.MatchedStripped+s.MatchedTransferID)
	require.Equal(t, uint64((n+6)/7), s.Duplicates)
	require.Zero(t, s.PendingRegistrations)
	require.Zero(t, s.PendingFinished)
}

func TestFlush(t *testing.T) {
	m := newM(t)
	_, _, _ = m.Register(t0, "d0", Key{RequestID: "a"}, 0, 1, "ra")
	_, _ = m.Finish(t0, Key{RequestID: "b"}, "fb")
	_, _ = m.Finish(t0, Key{RequestID: "c"}, "fc")
	_, _, _ = m.Register(t0, "d0", Key{RequestID: "c"}, 0, 1, "rc") // pairs: not flushed
	regs, fins := m.Flush()
	require.Equal(t, []ExpiredRegistration[string]{{Sender: "d0", Key: Key{RequestID: "a"}, Reg: "ra"}}, regs)
	require.Equal(t, []ExpiredFinished[string]{{Key: Key{RequestID: "b"}, Fin: "fb"}}, fins)
	s := m.Stats()
	require.Zero(t, s.PendingRegistrations+s.PendingFinished)
	require.Zero(t, s.ExpiredRegistrations+s.ExpiredFinished, "a flush is not an expiry")
	regs, fins = m.Expire(t0.Add(time.Hour))
	require.Empty(t, regs)
	require.Empty(t, fins)
}

func TestRegistrationDeadlineCountsFromReceipt(t *testing.T) {
	m := newM(t)
	_, _, _ = m.Register(t0.Add(10*time.Second), "d0", Key{RequestID: "later"}, 0, 1, "b")
	// Received earlier, admitted after a handshake.
	_, _, _ = m.Register(t0, "d0", Key{RequestID: "earlier"}, 0, 1, "a")
	next, ok := m.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(480*time.Second), next)
	regs, _ := m.Expire(t0.Add(480 * time.Second))
	require.Len(t, regs, 1)
	require.Equal(t, "earlier", regs[0].Key.RequestID)
}

func TestPendingFindsWaitingRegistrationsOnly(t *testing.T) {
	m, err := New[string, string](Config{})
	require.NoError(t, err)
	now := time.Unix(0, 0)
	k := Key{RequestID: "r-1", TransferID: "t"}
	_, out, err := m.Register(now, "d0", k, 0, 1, "reg")
	require.NoError(t, err)
	require.Equal(t, Pending, out)
	got, ok := m.Pending("d0", k)
	require.True(t, ok)
	require.Equal(t, "reg", got)
	_, ok = m.Pending("d1", k)
	require.False(t, ok, "another sender")
	_, ok = m.Pending("d0", Key{RequestID: "r-1"})
	require.False(t, ok, "without the transfer id")
	ms, err := m.Finish(now, Key{RequestID: "r-1"}, "fin")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	_, ok = m.Pending("d0", k)
	require.False(t, ok, "paired registrations no longer wait")
}

func TestWithdrawRemovesAWaitingRegistration(t *testing.T) {
	m := newM(t)
	_, _, err := m.Register(t0, "d0", Key{RequestID: "r-0123abcd"}, 0, 1, "old")
	require.NoError(t, err)
	_, _, err = m.Register(t0, "d0", Key{RequestID: "r-89abcdef"}, 0, 1, "new")
	require.NoError(t, err)
	reg, ok := m.Withdraw("d0", Key{RequestID: "r-0123abcd"})
	require.True(t, ok)
	require.Equal(t, "old", reg)
	_, ok = m.Withdraw("d0", Key{RequestID: "r-0123abcd"})
	require.False(t, ok, "withdrawn once")
	require.Equal(t, 1, m.PendingRegistrations())

	// The finished request pairs with the one left, not the withdrawn one.
	ms, err := m.Finish(t0, Key{RequestID: "r-55555555"}, "fin")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "new", ms[0].Reg)

	// The same identity registers again as a new registration.
	_, out, err := m.Register(t0, "d0", Key{RequestID: "r-0123abcd"}, 0, 1, "again")
	require.NoError(t, err)
	require.Equal(t, Pending, out)
	regs, _ := m.Expire(t0.Add(480 * time.Second))
	require.Len(t, regs, 1, "the withdrawn entry never expires")
	require.Equal(t, "again", regs[0].Reg)
}

// The same sender and key with another non-zero seq is the same request id
// registered again, not a duplicate: it replaces a pending registration
// and is admitted after a paired one. The same seq, or a seq on one side
// only, is still a duplicate.
func TestRegisteredAgainWithNewSeqIsNotADuplicate(t *testing.T) {
	m := newM(t)
	k := Key{RequestID: "r1"}
	_, out, _ := m.Register(t0, "d0", k, 1, 1, "first")
	require.Equal(t, Pending, out)
	_, out, _ = m.Register(t0, "d0", k, 1, 1, "copy")
	require.Equal(t, Duplicate, out, "same seq: the same message")
	_, out, _ = m.Register(t0, "d0", k, 0, 1, "no seq")
	require.Equal(t, Duplicate, out, "no seq: cannot tell, a duplicate as before")
	mt, out, _ := m.Register(t0, "d0", k, 2, 1, "second")
	require.Equal(t, Pending, out)
	require.True(t, mt.Superseded)
	require.Equal(t, "first", mt.Replaced)
	require.Equal(t, 1, m.PendingRegistrations())
	got, err := m.Finish(t0, k, "fin")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "second", got[0].Reg, "the replaced registration pairs with nothing")
	// Paired: the same seq again is a duplicate, a new one waits for a new finish.
	_, out, _ = m.Register(t0, "d0", k, 2, 1, "second again")
	require.Equal(t, Duplicate, out)
	mt, out, _ = m.Register(t0, "d0", k, 3, 1, "third")
	require.Equal(t, Pending, out)
	require.False(t, mt.Superseded)
	got, err = m.Finish(t0, k, "fin2")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "third", got[0].Reg)
	s := m.Stats()
	require.Equal(t, uint64(3), s.Duplicates)
	require.Equal(t, uint64(1), s.Superseded)
	// Nothing replaced is left to expire.
	regs, _ := m.Expire(t0.Add(time.Hour))
	require.Empty(t, regs)
}

// A tombstone replaced by a later pairing of the same identity lasts its
// own TTL: the earlier one's deadline does not remove it.
func TestReplacedTombstoneKeepsItsOwnDeadline(t *testing.T) {
	m := newM(t)
	k := Key{RequestID: "r1"}
	_, out, _ := m.Register(t0, "d0", k, 1, 1, "seq1")
	require.Equal(t, Pending, out)
	_, err := m.Finish(t0, k, "fin1")
	require.NoError(t, err)

	later := t0.Add(100 * time.Second)
	_, out, _ = m.Register(later, "d0", k, 2, 1, "seq2")
	require.Equal(t, Pending, out, "a new seq is not a duplicate")
	got, err := m.Finish(later, k, "fin2")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "seq2", got[0].Reg)

	m.Expire(t0.Add(481 * time.Second)) // past seq1's tombstone, not seq2's
	_, out, _ = m.Register(t0.Add(481*time.Second), "d0", k, 2, 1, "seq2 again")
	require.Equal(t, Duplicate, out)

	m.Expire(later.Add(481 * time.Second))
	_, out, _ = m.Register(later.Add(481*time.Second), "d0", k, 2, 1, "seq2 after its TTL")
	require.Equal(t, Pending, out)
	require.Equal(t, uint64(1), m.Stats().Duplicates)
}

// A registration received long before it is admitted may leave a
// tombstone whose deadline an expiry has already passed: a copy is still
// a duplicate until the next expiry that reaches that deadline, as when
// tombstones were queued.
func TestLateRegistrationsTombstoneLastsUntilTheNextExpiry(t *testing.T) {
	m := newM(t)
	_, err := m.Finish(t0, Key{RequestID: "a"}, "fin")
	require.NoError(t, err)
	m.Expire(t0.Add(time.Hour))
	_, err = m.Finish(t0.Add(time.Hour), Key{RequestID: "a"}, "fin2")
	require.NoError(t, err)
	received := t0.Add(time.Hour - 500*time.Second) // its tombstone is due 20 s before the last expiry
	mt, out, err := m.Register(received, "d0", Key{RequestID: "a"}, 0, 1, "reg")
	require.NoError(t, err)
	require.Equal(t, Matched, out)
	require.Equal(t, "fin2", mt.Fin)
	_, out, _ = m.Register(t0.Add(time.Hour), "d0", Key{RequestID: "a"}, 0, 1, "copy")
	require.Equal(t, Duplicate, out)
	m.Expire(t0.Add(time.Hour - 21*time.Second)) // not yet its deadline
	_, out, _ = m.Register(t0.Add(time.Hour), "d0", Key{RequestID: "a"}, 0, 1, "copy")
	require.Equal(t, Duplicate, out)
	m.Expire(t0.Add(time.Hour - 20*time.Second))
	_, out, _ = m.Register(t0.Add(time.Hour), "d0", Key{RequestID: "a"}, 0, 1, "after")
	require.Equal(t, Pending, out)
}
