package pushconn

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// regRecorder keeps a copy of every PUSH_REG a decode agent sends (and
// sends it on), so a test can deliver one again later, as a network that
// duplicates a message would.
type regRecorder struct {
	nixl.Agent
	mu   sync.Mutex
	regs []sentNotif
}

type sentNotif struct {
	to  string
	msg []byte
}

func (a *regRecorder) GenNotif(remote string, msg []byte, opts *nixl.Options) error {
	if strings.HasPrefix(string(msg), pushwire.RegPrefix) {
		a.mu.Lock()
		a.regs = append(a.regs, sentNotif{to: remote, msg: append([]byte(nil), msg...)})
		a.mu.Unlock()
	}
	return a.Agent.GenNotif(remote, msg, opts)
}

// resend delivers the last recorded PUSH_REG naming id once more.
func (a *regRecorder) resend(t testing.TB, id string) {
	t.Helper()
	a.mu.Lock()
	var last *sentNotif
	for i := range a.regs {
		if reg, err := pushwire.DecodeRegistration(a.regs[i].msg); err == nil && reg.RequestID == id {
			last = &a.regs[i]
		}
	}
	a.mu.Unlock()
	require.NotNil(t, last, "no PUSH_REG of %q recorded", id)
	require.NoError(t, a.Agent.GenNotif(last.to, last.msg, nil))
}

// seqlessRig is a rig whose decode agent records its PUSH_REGs; a first
// request is pushed through it, so that prefill knows decode's agent and
// answers a cancel at once.
func seqlessRig(t *testing.T) (*rig, *regRecorder) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fab.Close()) })
	var dec *regRecorder
	r := newRig(t, rigConfig{newAgent: func(t testing.TB, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		if strings.HasPrefix(name, "decode") {
			dec = &regRecorder{Agent: a}
			return dec
		}
		return a
	}})
	pushOne(t, r, true, "before", "before", blocksFrom(0, 1), blocksFrom(0, 1), 16)
	return r, dec
}

// Hole 5: a registration without registration_seq (vLLM's decode sends
// none) that decode cancelled — prefill withdrew it and acknowledged, and
// decode gave the blocks back to the engine — came again as a late
// network copy; prefill admitted the copy and wrote into the released
// blocks when the request finished.
func TestSeqlessLateCopyOfCancelledRegistrationDropped(t *testing.T) {
	r, dec := seqlessRig(t)
	c, p := r.consumers[0], r.producers[0]
	dst := blocksFrom(4, 2)
	require.NoError(t, c.Register("late", Coordinates(r.pre), dst, withoutSeq()))
	admitted(t, p, 2)
	require.NoError(t, c.Abort("late"))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_ack_received"), "prefill acknowledged the cancel")
	poison(t, r.decLayout[0], dst) // the engine takes the blocks back

	dec.resend(t, "late") // the late copy
	eventually(t, "the copy received", func() bool { return extra(t, p.Stats(), "registrations_received") == 3 })
	fill(t, r.preLayout[0], blocksFrom(1, 2), 3, 32)
	_, err := p.RequestFinished("late", blocksFrom(1, 2))
	require.NoError(t, err)
	freedOnce(t, p, "late")
	time.Sleep(20 * time.Millisecond)
	require.True(t, poisoned(t, r.decLayout[0], dst), "a WRITE landed in blocks decode handed back")
	assert.Equal(t, uint64(1), p.Stats().Transfers, "only the first request's WRITE")
	assert.Equal(t, uint64(1), extra(t, p.Stats(), "seqless_copies_dropped"))
}

// What the copy rule leaves alone: a new seq-less registration of the same
// id with other blocks, after the first was cancelled, is not a copy and
// is written.
func TestSeqlessReRegistrationWithOtherBlocksIsWritten(t *testing.T) {
	r, _ := seqlessRig(t)
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("again", Coordinates(r.pre), blocksFrom(4, 2), withoutSeq()))
	admitted(t, p, 2)
	require.NoError(t, c.Abort("again"))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)

	dst := blocksFrom(8, 2)
	require.NoError(t, c.Register("again", Coordinates(r.pre), dst, withoutSeq()))
	admitted(t, p, 3)
	fill(t, r.preLayout[0], blocksFrom(1, 2), 5, 32)
	_, err := p.RequestFinished("again", blocksFrom(1, 2))
	require.NoError(t, err)
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	require.Positive(t, check(t, r.decLayout[0], dst, 0, 5, 32))
	freedOnce(t, p, "again")
	assert.Zero(t, extra(t, p.Stats(), "seqless_copies_dropped"))
}

// The same for a seq-less registration prefill refused with PUSH_FAIL (here
// at its registration timeout): decode fails the request and takes the
// blocks back, so a late copy must not be admitted either.
func TestSeqlessLateCopyOfFailedRegistrationDropped(t *testing.T) {
	r, dec := seqlessRig(t)
	c, p := r.consumers[0], r.producers[0]
	dst := blocksFrom(4, 2)
	require.NoError(t, c.Register("late", Coordinates(r.pre), dst, withoutSeq()))
	admitted(t, p, 2)
	r.clock.Advance(defaultProducerRegistrationTimeout + time.Second)
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "expired"), "err = %v", res[0].Err)
	poison(t, r.decLayout[0], dst)

	dec.resend(t, "late")
	eventually(t, "the copy received", func() bool { return extra(t, p.Stats(), "registrations_received") == 3 })
	fill(t, r.preLayout[0], blocksFrom(1, 2), 3, 32)
	_, err := p.RequestFinished("late", blocksFrom(1, 2))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.True(t, poisoned(t, r.decLayout[0], dst), "a WRITE landed in blocks decode handed back")
	assert.Equal(t, uint64(1), p.Stats().Transfers, "only the first request's WRITE")
	assert.Equal(t, uint64(1), extra(t, p.Stats(), "seqless_copies_dropped"))
}
