package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A request whose lease ran out is retried; prefill's engine gives the
// retry a new suffix. A registration pairing with the retry's finished
// blocks by stripped id is written: the lapsed attempt refuses nothing
// that live blocks pair with.
func TestRetryPairsWithLiveBlocksDespiteLapsedAttempt(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.Lease = time.Second }})
	c, p := r.consumers[0], r.producers[0]
	_, err := p.RequestFinished("chat-0123abcd", blocksFrom(0, 1))
	require.NoError(t, err)
	r.clock.Advance(time.Second)
	freedOnce(t, p, "chat-0123abcd") // lapsed: no registration came in time

	// The proxy retries the same request: prefill's engine appends a new suffix.
	fill(t, r.preLayout[0], []int{1}, 4, 16)
	_, err = p.RequestFinished("chat-55555555", []int{1})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // the writer takes the finished request
	require.NoError(t, c.Register("chat-89abcdef", Coordinates(r.pre), []int{5}))
	res := await(t, c, 1)
	require.NoError(t, res[0].Err, "live blocks of the retry were waiting in the matcher")
	check(t, r.decLayout[0], []int{5}, 0, 4, 16)
}

// The usual push order (decode registers before prefill finishes) for a
// retry of a request whose earlier attempt lapsed: a registration that
// matches the lapsed attempt only by stripped id waits for the retry's
// blocks instead of getting PUSH_FAIL expired.
func TestEarlyRegistrationOfRetryWaitsDespiteLapsedAttempt(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.Lease = time.Second }})
	c, p := r.consumers[0], r.producers[0]
	_, err := p.RequestFinished("chat-0123abcd", blocksFrom(0, 1))
	require.NoError(t, err)
	r.clock.Advance(time.Second)
	freedOnce(t, p, "chat-0123abcd") // lapsed

	require.NoError(t, c.Register("chat-89abcdef", Coordinates(r.pre), []int{5})) // the retry, early
	admitted(t, p, 1)
	time.Sleep(20 * time.Millisecond)
	fill(t, r.preLayout[0], []int{1}, 4, 16)
	_, err = p.RequestFinished("chat-55555555", []int{1})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{5}, 0, 4, 16)
}
