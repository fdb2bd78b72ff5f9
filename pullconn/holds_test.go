package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/notif"
)

var t0 = time.Unix(1_000_000, 0)

func TestHoldsReleaseAfterExpectedCompletions(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 16)
	require.NoError(t, err)
	require.NoError(t, h.finish("r", []int{1, 2}, t0))
	// Decode TP 2 reads prefill TP 1: two completions "r:2".
	out, err := h.complete(notif.Completion{ID: "r", N: 2}, "d1")
	require.NoError(t, err)
	assert.Equal(t, completionCounted, out)
	out, err = h.complete(notif.Completion{ID: "r", N: 2}, "d2")
	require.NoError(t, err)
	assert.Equal(t, completionDone, out)
	assert.Equal(t, 0, h.len())
	out, _ = h.complete(notif.Completion{ID: "r", N: 2}, "d3")
	assert.Equal(t, completionUnknown, out, "a third completion is for no held request")
	assert.Empty(t, h.expire(t0.Add(time.Hour), t0.Add(time.Hour)), "released requests never expire")
}

// One decode rank's second completion (it loaded the request twice) does
// not count as another rank's: that rank may still be reading.
func TestHoldsCountEachDecodeAgentOnce(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 16)
	require.NoError(t, err)
	require.NoError(t, h.finish("r", []int{1}, t0))
	out, err := h.complete(notif.Completion{ID: "r", N: 2}, "decode-0")
	require.NoError(t, err)
	assert.Equal(t, completionCounted, out)
	out, err = h.complete(notif.Completion{ID: "r", N: 2}, "decode-0")
	assert.Equal(t, completionDuplicate, out)
	assert.EqualError(t, err, `second completion for request "r" from decode agent "decode-0"`)
	assert.Equal(t, 1, h.len(), "still held for decode-1")
	out, _ = h.complete(notif.Completion{ID: "r", N: 2}, "decode-1")
	assert.Equal(t, completionDone, out)
}

func TestHoldsExpectedCount(t *testing.T) {
	h, _ := newHolds(2, time.Second, 1)
	assert.Equal(t, 1, h.expectedFor(1), "decode TP 1 reads both prefill ranks once")
	assert.Equal(t, 1, h.expectedFor(2))
	assert.Equal(t, 2, h.expectedFor(4))
}

func TestHoldsInconsistentCountChangesNothing(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("r", nil, t0))
	out, _ := h.complete(notif.Completion{ID: "r", N: 4}, "d4")
	require.Equal(t, completionCounted, out)
	out, err := h.complete(notif.Completion{ID: "r", N: 2}, "d5")
	assert.Equal(t, completionInvalid, out)
	assert.EqualError(t, err, `completion for request "r" says decode TP 2 (expect 2 completions), earlier ones said 4`)
	assert.Equal(t, 1, h.reqs["r"].got)
}

func TestHoldsExpireThenLate(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("r", nil, t0))
	assert.Empty(t, h.expire(t0.Add(29*time.Second), t0.Add(29*time.Second)))
	assert.Equal(t, []string{"r"}, h.expire(t0.Add(30*time.Second), t0.Add(30*time.Second)))
	assert.Empty(t, h.expire(t0.Add(31*time.Second), t0.Add(31*time.Second)), "expires once")
	out, err := h.complete(notif.Completion{ID: "r", N: 1}, "d6")
	assert.Equal(t, completionLate, out)
	assert.EqualError(t, err, `completion for request "r" after its lease expired`)
	out, _ = h.complete(notif.Completion{ID: "never", N: 1}, "d7")
	assert.Equal(t, completionUnknown, out)
}

func TestHoldsHeartbeatExtends(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("r", nil, t0))
	assert.Equal(t, []string{"r"}, h.heartbeat([]string{"r", "zz"}, t0.Add(25*time.Second), 20*time.Second))
	assert.Empty(t, h.expire(t0.Add(44*time.Second), t0.Add(44*time.Second)))
	assert.Equal(t, []string{"r"}, h.expire(t0.Add(45*time.Second), t0.Add(45*time.Second)))
}

func TestHoldsDuplicateFinish(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("r", []int{1}, t0))
	assert.ErrorIs(t, h.finish("r", []int{2}, t0), connector.ErrInvalid)
	assert.Equal(t, []int{1}, h.reqs["r"].blocks)
}

func TestHoldsIDReusedAfterExpiry(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("r", nil, t0))
	h.expire(t0.Add(time.Minute), t0.Add(time.Minute))
	require.NoError(t, h.finish("r", nil, t0.Add(time.Minute)))
	out, _ := h.complete(notif.Completion{ID: "r", N: 1}, "d8")
	assert.Equal(t, completionDone, out)
}

func TestRecentForgetsOldest(t *testing.T) {
	r := newRecent(2)
	r.add("a")
	r.add("b")
	r.add("c")
	assert.False(t, r.has("a"))
	assert.True(t, r.has("b"))
	assert.True(t, r.has("c"))
	r.remove("b")
	assert.False(t, r.has("b"))
	r.add("d")
	r.add("e")
	assert.False(t, r.has("c"))
	assert.True(t, r.has("d"))
}

func TestHoldsReleaseAll(t *testing.T) {
	h, _ := newHolds(1, 30*time.Second, 16)
	require.NoError(t, h.finish("a", nil, t0))
	require.NoError(t, h.finish("b", nil, t0))
	assert.ElementsMatch(t, []string{"a", "b"}, h.releaseAll())
	assert.Empty(t, h.expire(t0.Add(time.Hour), t0.Add(time.Hour)))
	assert.Equal(t, 0, h.leases.Len())
}

// A pinned hold outlives its lease until the pin ends on the monotonic
// clock, and is released once then; its keyed completion releases it at
// any time, a plain or wrongly keyed one never.
func TestHoldsPinOutlivesTheLease(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 16)
	require.NoError(t, err)
	require.NoError(t, h.finish("r", []int{1}, t0))
	h.setKey("r", 77)
	mono := time.Unix(5, 0)
	require.Equal(t, "", h.pin("r", 77, "decode", "decode-0", mono.Add(10*time.Second)))
	assert.Empty(t, h.expire(t0.Add(time.Hour), mono.Add(9*time.Second)), "the lease ran out, the pin did not")
	assert.Equal(t, 1, h.len())
	out, _ := h.complete(notif.Completion{ID: "r", N: 1}, "decode-0")
	assert.Equal(t, completionStale, out, "a pinned hold's completion names it")
	out, _ = h.complete(notif.Completion{ID: "r", N: 1, Seq: 78}, "decode-0")
	assert.Equal(t, completionStale, out, "another hold's key")
	assert.Equal(t, []string{"r"}, h.expire(t0.Add(time.Hour), mono.Add(10*time.Second)))
	assert.Empty(t, h.expire(t0.Add(2*time.Hour), mono.Add(time.Hour)), "released once")

	require.NoError(t, h.finish("s", []int{2}, t0))
	h.setKey("s", 5)
	require.Equal(t, "", h.pin("s", 5, "decode", "decode-0", mono.Add(10*time.Second)))
	assert.Empty(t, h.expire(t0.Add(time.Hour), mono))
	out, err = h.complete(notif.Completion{ID: "s", N: 1, Seq: 5}, "decode-0")
	require.NoError(t, err)
	assert.Equal(t, completionDone, out)
	assert.Empty(t, h.expire(t0.Add(time.Hour), mono.Add(time.Hour)), "completed, not expired")
}

// A pin names the hold exactly and binds it to one decode engine.
func TestHoldsPinRefusals(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 16)
	require.NoError(t, err)
	until := time.Unix(100, 0)
	assert.Equal(t, "it holds no such request", h.pin("r", 1, "a", "a-0", until))
	require.NoError(t, h.finish("r", []int{1}, t0))
	assert.Equal(t, "it holds other blocks for it than the Params name", h.pin("r", 1, "a", "a-0", until), "no key yet")
	h.setKey("r", 9)
	assert.Equal(t, "it holds other blocks for it than the Params name", h.pin("r", 8, "a", "a-0", until))
	assert.Equal(t, "", h.pin("r", 9, "a", "a-0", until))
	assert.Equal(t, "", h.pin("r", 9, "a", "a-1", until), "another rank of the same engine")
	assert.Equal(t, `it holds it for decode engine "a"`, h.pin("r", 9, "b", "b-0", until))
	out, _ := h.complete(notif.Completion{ID: "r", N: 1, Seq: 9}, "b-0")
	assert.Equal(t, completionForeign, out, "another engine's agent")
	h.expire(t0.Add(time.Hour), until)
	assert.Equal(t, "its hold expired", h.pin("r", 9, "a", "a-0", until))
}

// In gonixl's protocol (keyed) every decode names the hold it read: a
// plain completion comes from no reader, is refused and changes nothing,
// not even what drop counts as a hold somebody asked about.
func TestHoldsKeyedRefusesPlainCompletions(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 16)
	require.NoError(t, err)
	h.keyed = true
	require.NoError(t, h.finish("r", []int{1}, t0))
	h.setKey("r", 7)
	out, err := h.complete(notif.Completion{ID: "r", N: 1}, "intruder")
	assert.Equal(t, completionPlain, out)
	assert.EqualError(t, err, `plain completion for request "r" from agent "intruder": this rank's decodes name the hold they read`)
	r := h.reqs["r"]
	require.NotNil(t, r, "still held")
	assert.Equal(t, 0, r.got)
	assert.Equal(t, 0, r.expected)
	assert.Empty(t, r.from)
	assert.Empty(t, r.reader)
	out, _ = h.complete(notif.Completion{ID: "gone", N: 1}, "intruder")
	assert.Equal(t, completionUnknown, out, "an id not held is unknown, as before")
	out, err = h.complete(notif.Completion{ID: "r", N: 1, Seq: 7}, "decode-0")
	require.NoError(t, err)
	assert.Equal(t, completionDone, out, "the reader's keyed completion releases it")
}
