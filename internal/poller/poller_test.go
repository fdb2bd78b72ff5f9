package poller

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/nixl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAgent implements only GetNotifs; any other call panics the test.
type fakeAgent struct {
	nixl.Agent
	mu     sync.Mutex
	queue  nixl.Notifs
	err    error
	rounds atomic.Int64
}

func (a *fakeAgent) push(sender, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queue == nil {
		a.queue = nixl.Notifs{}
	}
	a.queue[sender] = append(a.queue[sender], []byte(msg))
}

func (a *fakeAgent) GetNotifs(*nixl.Options) (nixl.Notifs, error) {
	a.rounds.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return nil, a.err
	}
	q := a.queue
	a.queue = nil
	return q, nil
}

type rec struct {
	mu  sync.Mutex
	got []string
}

func (r *rec) handler(tag string) Handler {
	return func(sender string, msg []byte) {
		r.mu.Lock()
		r.got = append(r.got, tag+"|"+sender+"|"+string(msg))
		r.mu.Unlock()
	}
}

func TestRoutesByLongestPrefix(t *testing.T) {
	a := &fakeAgent{}
	p := New(a, Options{})
	var r rec
	p.Handle("HB:", r.handler("hb"))
	p.Handle("PUSH_", r.handler("push"))
	p.Handle("PUSH_REG:", r.handler("reg"))
	p.Handle("", r.handler("other"))
	a.push("b", "req-1:2")
	a.push("a", "HB:x,y")
	a.push("a", "PUSH_REG:\x81")
	a.push("a", "PUSH_FAIL:z")
	p.Round()
	assert.Equal(t, []string{
		"hb|a|HB:x,y", "reg|a|PUSH_REG:\x81", "push|a|PUSH_FAIL:z", // sender a, in order sent
		"other|b|req-1:2",
	}, r.got)
}

func TestUnroutedDroppedWithoutDefault(t *testing.T) {
	a := &fakeAgent{}
	p := New(a, Options{})
	var r rec
	p.Handle("HB:", r.handler("hb"))
	a.push("a", "req:1")
	p.Round()
	assert.Empty(t, r.got)
}

func TestTickRunsAfterNotifications(t *testing.T) {
	a := &fakeAgent{}
	var order []string
	p := New(a, Options{Tick: func() { order = append(order, "tick") }})
	p.Handle("", func(_ string, m []byte) { order = append(order, string(m)) })
	a.push("a", "n1")
	p.Round()
	assert.Equal(t, []string{"n1", "tick"}, order)
}

func TestErrorsReportedExceptClosed(t *testing.T) {
	a := &fakeAgent{err: errors.New("boom")}
	var errs []error
	p := New(a, Options{OnError: func(err error) { errs = append(errs, err) }})
	p.Round()
	a.err = nixl.ErrClosed
	p.Round()
	require.Len(t, errs, 1)
	assert.EqualError(t, errs[0], "boom")
}

func TestWakeRunsARoundWhileIdle(t *testing.T) {
	a := &fakeAgent{}
	got := make(chan string, 1)
	p := New(a, Options{IdleInterval: time.Hour, Busy: func() bool { return false }})
	p.Handle("", func(_ string, m []byte) { got <- string(m) })
	p.Start()
	defer p.Stop()
	require.Eventually(t, func() bool { return a.rounds.Load() >= 1 }, 5*time.Second, time.Millisecond)
	a.push("a", "wake-me")
	p.Wake()
	select {
	case m := <-got:
		assert.Equal(t, "wake-me", m)
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not run a round")
	}
}

func TestBusyPollsWithoutWake(t *testing.T) {
	a := &fakeAgent{}
	p := New(a, Options{Interval: time.Millisecond})
	p.Start()
	require.Eventually(t, func() bool { return a.rounds.Load() >= 5 }, 5*time.Second, time.Millisecond)
	p.Stop()
	n := a.rounds.Load()
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, n, a.rounds.Load(), "no round after Stop")
	p.Stop() // idempotent
}

func TestStopWithoutStart(t *testing.T) {
	New(&fakeAgent{}, Options{}).Stop()
}

// A period under the timer floor is napped, not timed (yielding under
// spinBelow, sleeping above): the poller keeps polling while busy, a Wake
// during a long idle nap still runs a round, and Stop ends it mid-nap with
// no round after.
func TestSubMillisecondIntervalNaps(t *testing.T) {
	a := &fakeAgent{}
	var busy atomic.Bool
	busy.Store(true)
	got := make(chan string, 1)
	p := New(a, Options{Interval: 20 * time.Microsecond, IdleInterval: 900 * time.Microsecond, Busy: busy.Load})
	p.Handle("", func(_ string, m []byte) { got <- string(m) })
	p.Start()
	require.Eventually(t, func() bool { return a.rounds.Load() >= 50 }, 10*time.Second, time.Millisecond)
	busy.Store(false)
	a.push("a", "wake-me")
	p.Wake()
	select {
	case m := <-got:
		assert.Equal(t, "wake-me", m)
	case <-time.After(10 * time.Second):
		t.Fatal("no round delivered the notification")
	}
	p.Stop()
	n := a.rounds.Load()
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, n, a.rounds.Load(), "no round after Stop")
}
