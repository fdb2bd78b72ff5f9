package poller

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// scriptedAgent answers XferStatus from a script of statuses per request
// (the last one repeats) and delivers queued notifications, counting calls.
// Unknown requests get StatusInvalidParam, as a released handle does.
type scriptedAgent struct {
	fakeAgent
	smu        sync.Mutex
	script     map[nixl.XferHandle][]nixl.Status
	statusCall int
}

func (a *scriptedAgent) XferStatus(req nixl.XferHandle) (nixl.Status, error) {
	a.smu.Lock()
	defer a.smu.Unlock()
	a.statusCall++
	return a.next(req)
}

func (a *scriptedAgent) next(req nixl.XferHandle) (nixl.Status, error) {
	q, ok := a.script[req]
	if !ok {
		return nixl.StatusInvalidParam, nixl.NewError("nixlAgent::getXferStatus", nixl.StatusInvalidParam, "transfer handle %d is not live", req)
	}
	s := q[0]
	if len(q) > 1 {
		a.script[req] = q[1:]
	}
	if s.IsError() {
		return s, nixl.NewError("nixlAgent::getXferStatus", s, "transfer %d", req)
	}
	return s, nil
}

// batchAgent is a scriptedAgent that also implements nixl.BatchPoller; it
// refuses the whole call, polling nothing, when a handle is unknown.
type batchAgent struct {
	scriptedAgent
	polls int
}

var _ nixl.BatchPoller = (*batchAgent)(nil)

func (a *batchAgent) Poll(reqs []nixl.XferHandle, statuses []nixl.Status, notifs nixl.Notifs) error {
	a.smu.Lock()
	defer a.smu.Unlock()
	a.polls++
	if len(statuses) != len(reqs) {
		return fmt.Errorf("test: %d statuses for %d requests", len(statuses), len(reqs))
	}
	for _, req := range reqs {
		if _, ok := a.script[req]; !ok {
			return nixl.NewError("nixlAgent::getXferStatus", nixl.StatusInvalidParam, "transfer handle %d is not live", req)
		}
	}
	for i, req := range reqs {
		statuses[i], _ = a.next(req)
	}
	if notifs != nil {
		a.mu.Lock()
		for k, v := range a.queue {
			notifs[k] = append(notifs[k], v...)
		}
		a.queue = nil
		a.mu.Unlock()
	}
	return nil
}

// agentUnderTest is what the scenario needs of either fake.
type agentUnderTest interface {
	nixl.Agent
	push(sender, msg string)
}

// runScenario watches three transfers and feeds notifications over four
// rounds, and returns everything the owner saw, in order.
func runScenario(t *testing.T, a agentUnderTest, script map[nixl.XferHandle][]nixl.Status) []string {
	t.Helper()
	var mu sync.Mutex
	var log []string
	add := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	p := New(a, Options{Tick: func() { add("tick") }})
	p.Handle("", func(sender string, msg []byte) { add(fmt.Sprintf("notif %s %s", sender, msg)) })
	done := func(req nixl.XferHandle, s nixl.Status, err error) {
		add(fmt.Sprintf("done %d %v err=%v", req, s, err != nil))
	}
	for _, req := range []nixl.XferHandle{1, 2, 3} {
		p.Watch(req, done)
	}
	a.push("b", "req-1:2")
	a.push("a", "HB:x")
	p.Round()
	a.push("a", "req-3:1")
	p.Round()
	p.Round()
	p.Round()
	assert.Zero(t, p.Watching())
	return log
}

func scenarioScript() map[nixl.XferHandle][]nixl.Status {
	return map[nixl.XferHandle][]nixl.Status{
		1: {nixl.StatusInProgress, nixl.StatusSuccess},
		2: {nixl.StatusBackend},
		3: {nixl.StatusInProgress, nixl.StatusInProgress, nixl.StatusSuccess},
	}
}

var scenarioWant = []string{
	"done 2 NIXL_ERR_BACKEND err=true", "notif a HB:x", "notif b req-1:2", "tick",
	"done 1 NIXL_SUCCESS err=false", "notif a req-3:1", "tick",
	"done 3 NIXL_SUCCESS err=false", "tick",
	"tick",
}

func TestBatchPollerUsedAndRoutedLikeSingleCalls(t *testing.T) {
	single := &scriptedAgent{script: scenarioScript()}
	batch := &batchAgent{scriptedAgent: scriptedAgent{script: scenarioScript()}}

	gotSingle := runScenario(t, single, single.script)
	gotBatch := runScenario(t, batch, batch.script)

	assert.Equal(t, scenarioWant, gotSingle)
	assert.Equal(t, gotSingle, gotBatch, "the batch path reports exactly what single calls report")
	// One Poll per round and nothing else on the batch agent; one status
	// call per watched transfer and round (3+2+1) and a GetNotifs per round
	// on the other.
	assert.Equal(t, 4, batch.polls)
	assert.Zero(t, batch.statusCall)
	assert.Zero(t, batch.rounds.Load(), "GetNotifs not called when Poll is available")
	assert.Equal(t, 6, single.statusCall)
	assert.Equal(t, int64(4), single.rounds.Load())
}

func TestBatchRefusedFallsBackAndEndsTheBadRequestOnce(t *testing.T) {
	a := &batchAgent{scriptedAgent: scriptedAgent{script: map[nixl.XferHandle][]nixl.Status{
		1: {nixl.StatusInProgress, nixl.StatusSuccess},
	}}}
	p := New(a, Options{})
	var got []string
	p.Handle("", func(sender string, msg []byte) { got = append(got, "notif "+sender+" "+string(msg)) })
	done := func(req nixl.XferHandle, s nixl.Status, err error) {
		got = append(got, fmt.Sprintf("done %d %v", req, s))
		if req == 9 {
			assert.ErrorIs(t, err, nixl.ErrInvalidParam)
		}
	}
	p.Watch(1, done)
	p.Watch(9, done) // released behind the poller's back
	a.push("a", "n1")
	p.Round() // Poll refused: one by one, 9 ends, 1 still in flight
	p.Round() // batched again: 1 ends
	p.Round()
	assert.Equal(t, []string{"done 9 NIXL_ERR_INVALID_PARAM", "notif a n1", "done 1 NIXL_SUCCESS"}, got)
	assert.Equal(t, 3, a.polls)
	assert.Equal(t, 2, a.statusCall, "only the refused round polled one by one")
}

func TestUnwatchedTransferNeverReported(t *testing.T) {
	a := &batchAgent{scriptedAgent: scriptedAgent{script: map[nixl.XferHandle][]nixl.Status{
		1: {nixl.StatusSuccess}, 2: {nixl.StatusSuccess},
	}}}
	p := New(a, Options{})
	var got []nixl.XferHandle
	done := func(req nixl.XferHandle, _ nixl.Status, _ error) { got = append(got, req) }
	p.Watch(1, done)
	p.Watch(2, done)
	p.Watch(2, done) // replaces, does not duplicate
	assert.Equal(t, 2, p.Watching())
	assert.True(t, p.Unwatch(1))
	assert.False(t, p.Unwatch(1))
	p.Round()
	p.Round()
	assert.Equal(t, []nixl.XferHandle{2}, got)
}

func TestBatchMessagesStayValidAcrossRounds(t *testing.T) {
	a := &batchAgent{}
	p := New(a, Options{})
	var kept [][]byte
	p.Handle("", func(_ string, msg []byte) { kept = append(kept, msg) })
	for i := range 5 {
		a.push("a", fmt.Sprintf("m%d", i))
		p.Round()
	}
	require.Len(t, kept, 5)
	for i, m := range kept {
		assert.Equal(t, fmt.Sprintf("m%d", i), string(m))
	}
	assert.Len(t, p.round.inbox["a"], 0, "the reused inbox is emptied after each round")
}

func TestBatchErrorsReportedExceptClosed(t *testing.T) {
	a := &closingBatchAgent{err: nixl.ErrClosed}
	var errs []error
	p := New(a, Options{OnError: func(err error) { errs = append(errs, err) }})
	called := false
	p.Watch(1, func(nixl.XferHandle, nixl.Status, error) { called = true })
	p.Round()
	assert.Empty(t, errs)
	assert.False(t, called, "a closed agent ends no watched transfer")
	assert.Equal(t, 1, p.Watching())
	a.err = fmt.Errorf("notifications: %w", nixl.ErrBackend)
	p.Round()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], nixl.ErrBackend)
}

// closingBatchAgent fails every Poll with err, writing no status.
type closingBatchAgent struct {
	nixl.Agent
	err error
}

func (a *closingBatchAgent) Poll([]nixl.XferHandle, []nixl.Status, nixl.Notifs) error { return a.err }
