package match

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ops drives a Matcher and the model through the same calls, decoded from
// data, and fails at the first answer that differs. The pools are small so
// that ids, stripped ids, transfer ids and senders collide often.
func runAgainstModel(t testing.TB, data []byte) {
	cfg := Config{RegistrationTTL: 10 * time.Second, FinishedTTL: 3 * time.Second}
	m, err := New[int, int](cfg)
	require.NoError(t, err)
	ref := &model{cfg: cfg}
	senders := []string{"d0", "d1", "d2"}
	bases := []string{"a", "b", "c", ""}
	suffixes := []string{"", "-0000aaaa", "-1111BBBB", "-2222cccc"}
	tids := []string{"", "", "t1", "t2"}
	now := time.Unix(1_700_000_000, 0)
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	key := func() Key {
		b := next()
		return Key{RequestID: bases[b&3] + suffixes[b>>2&3], TransferID: tids[b>>4&3]}
	}
	for step := 0; len(data) > 0; step++ {
		op := next()
		now = now.Add(time.Duration(next()) * 50 * time.Millisecond)
		switch op % 10 {
		case 0, 1, 2:
			b := next()
			sender, k := senders[b%3], key()
			seq, fanout := uint64(b>>2&3), int(b>>4&3)
			// Received before now (it waited for a handshake), up to
			// 60 s: longer than the registration TTL, so that some pair
			// with a tombstone whose deadline has already passed.
			at := now.Add(-time.Duration(b>>6) * 20 * time.Second)
			got, out, err := m.Register(at, sender, k, seq, fanout, step)
			want, wantOut, ok := ref.Register(at, sender, k, seq, fanout, step)
			require.Equal(t, ok, err == nil, "step %d: Register error %v", step, err)
			require.Equal(t, wantOut, out, "step %d: Register outcome", step)
			require.Equal(t, want, got, "step %d: Register match", step)
		case 3, 4, 5:
			k := key()
			got, err := m.Finish(now, k, step)
			want, ok := ref.Finish(now, k, step)
			require.Equal(t, ok, err == nil, "step %d: Finish error %v", step, err)
			require.Equal(t, want, got, "step %d: Finish matches", step)
		case 6:
			regs, fins := m.Expire(now)
			wregs, wfins := ref.Expire(now)
			require.Equal(t, wregs, regs, "step %d: expired registrations", step)
			require.Equal(t, wfins, fins, "step %d: expired finished", step)
		case 7:
			id := key().RequestID
			fin, served, ok := m.Cancel(id)
			wfin, wserved, wok := ref.Cancel(id)
			require.Equal(t, []any{wfin, wserved, wok}, []any{fin, served, ok}, "step %d: Cancel(%q)", step, id)
		case 8:
			until := now.Add(time.Duration(next()) * 50 * time.Millisecond)
			ids := []string{key().RequestID, key().RequestID}
			require.Equal(t, ref.Extend(until, ids...), m.Extend(until, ids...), "step %d: Extend", step)
		case 9:
			b := next()
			sender, k := senders[b%3], key()
			switch b >> 2 % 4 {
			case 0:
				reg, ok := m.Withdraw(sender, k)
				wreg, wok := ref.Withdraw(sender, k)
				require.Equal(t, []any{wreg, wok}, []any{reg, ok}, "step %d: Withdraw", step)
			case 1:
				reg, ok := m.Pending(sender, k)
				wreg, wok := ref.Pending(sender, k)
				require.Equal(t, []any{wreg, wok}, []any{reg, ok}, "step %d: Pending", step)
			case 2:
				if b>>4 == 0 {
					regs, fins := m.Flush()
					wregs, wfins := ref.Flush()
					require.Equal(t, wregs, regs, "step %d: flushed registrations", step)
					require.Equal(t, wfins, fins, "step %d: flushed finished", step)
				}
			}
		}
		next, ok := m.Next()
		wnext, wok := ref.Next()
		require.Equal(t, wok, ok, "step %d: Next", step)
		require.True(t, wnext.Equal(next), "step %d: Next %v, want %v", step, next, wnext)
		require.Equal(t, ref.Stats(), m.Stats(), "step %d: Stats", step)
		require.Equal(t, ref.Stats().PendingFinished > 0, m.WaitingFinished(), "step %d", step)
		require.Equal(t, len(ref.regs), m.PendingRegistrations(), "step %d", step)
	}
	if testing.Verbose() {
		t.Logf("%+v", m.Stats())
	}
}

// FuzzMatcherAgainstModel holds the Matcher to the model over call
// sequences the fuzzer chooses.
func FuzzMatcherAgainstModel(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 3, 0, 0})                                    // register then finish the same id
	f.Add([]byte{3, 1, 0x04, 0, 1, 0x08, 0x01, 6, 200})                   // finish, stripped register, expire
	f.Add([]byte{0, 0, 0x05, 0x20, 0, 0, 0x09, 0x20, 3, 0, 0x24, 6, 255}) // transfer ids, seqs
	rng := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		b := make([]byte, 300)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runAgainstModel(t, data) })
}

// TestMatcherAgainstModel runs long random call sequences through
// runAgainstModel, so that plain go test covers far more than the fuzz
// seeds.
func TestMatcherAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 200 {
		b := make([]byte, 3000)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		runAgainstModel(t, b)
	}
}
