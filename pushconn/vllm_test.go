package pushconn

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/vllm"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// notifTap stands between a rank and its agent and keeps a copy of every
// notification the rank receives.
type notifTap struct {
	nixl.Agent
	mu   sync.Mutex
	got  []sentNotif // to: the sender
	sent []sentNotif
}

func (a *notifTap) GetNotifs(opts *nixl.Options) (nixl.Notifs, error) {
	n, err := a.Agent.GetNotifs(opts)
	a.mu.Lock()
	for from, msgs := range n {
		for _, m := range msgs {
			a.got = append(a.got, sentNotif{to: from, msg: append([]byte(nil), m...)})
		}
	}
	a.mu.Unlock()
	return n, err
}

func (a *notifTap) GenNotif(remote string, msg []byte, opts *nixl.Options) error {
	a.mu.Lock()
	a.sent = append(a.sent, sentNotif{to: remote, msg: append([]byte(nil), msg...)})
	a.mu.Unlock()
	return a.Agent.GenNotif(remote, msg, opts)
}

// received returns the messages received that start with prefix.
func (a *notifTap) received(prefix string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, n := range a.got {
		if strings.HasPrefix(string(n.msg), prefix) {
			out = append(out, string(n.msg))
		}
	}
	return out
}

// sentWith returns the messages sent that start with prefix.
func (a *notifTap) sentWith(prefix string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, n := range a.sent {
		if strings.HasPrefix(string(n.msg), prefix) {
			out = append(out, string(n.msg))
		}
	}
	return out
}

// vllmRig is a rig of two engines in vLLM's protocol whose agents are
// tapped.
func vllmRig(t *testing.T, rc rigConfig) (*rig, map[string]*notifTap) {
	rc.vllm = true
	taps := map[string]*notifTap{}
	rc.wrap = func(name string, a nixl.Agent) nixl.Agent {
		tap := &notifTap{Agent: a}
		taps[name] = tap
		return tap
	}
	return newRig(t, rc), taps
}

// vllmPushReg is the PUSH_REG vLLM's decode sends, built here from the
// facts (an 11-entry map in vLLM's key order, msgpack's most compact forms)
// independently of pushwire's encoder.
func vllmPushReg(t testing.TB, v map[string]any) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("PUSH_REG:")
	enc := msgpack.NewEncoder(&b)
	keys := []string{"request_id", "decode_engine_id", "decode_host", "decode_port", "decode_tp_size", "local_block_ids",
		"remote_engine_id", "remote_host", "remote_port", "remote_tp_size", "remote_pp_size"}
	require.NoError(t, enc.EncodeMapLen(len(keys)))
	for _, k := range keys {
		require.NoError(t, enc.EncodeString(k))
		switch x := v[k].(type) {
		case string:
			require.NoError(t, enc.EncodeString(x))
		case int:
			require.NoError(t, enc.EncodeInt(int64(x)))
		case float64: // from JSON
			require.NoError(t, enc.EncodeInt(int64(x)))
		case [][]int:
			require.NoError(t, enc.EncodeArrayLen(len(x)))
			for _, g := range x {
				require.NoError(t, enc.EncodeArrayLen(len(g)))
				for _, id := range g {
					require.NoError(t, enc.EncodeInt(int64(id)))
				}
			}
		case []any: // from JSON
			require.NoError(t, enc.EncodeArrayLen(len(x)))
			for _, g := range x {
				ids := g.([]any)
				require.NoError(t, enc.EncodeArrayLen(len(ids)))
				for _, id := range ids {
					require.NoError(t, enc.EncodeInt(int64(id.(float64))))
				}
			}
		default:
			t.Fatalf("key %s: unexpected %T", k, x)
		}
	}
	return b.Bytes()
}

// The test's own PUSH_REG builder reproduces the independent encoder's
// vector (testdata/push_reg.json, case "basic") byte for byte, so what it
// builds below is vLLM's wire.
func TestVLLMPushRegBuilderMatchesVector(t *testing.T) {
	raw, err := os.ReadFile("../testdata/push_reg.json")
	require.NoError(t, err)
	var doc struct {
		Cases []struct {
			Name   string
			Hex    string
			Expect map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	for _, c := range doc.Cases {
		if c.Name != "basic" {
			continue
		}
		want, err := hex.DecodeString(c.Hex)
		require.NoError(t, err)
		assert.Equal(t, want, vllmPushReg(t, c.Expect))
		return
	}
	t.Fatal("no case basic in testdata/push_reg.json")
}

// Two gonixl engines in vLLM's protocol push a request's KV, every byte
// verified, across TP sizes: each decode rank sends each prefill rank that
// writes into it exactly vLLM's PUSH_REG (its 11 keys, no gonixl extras),
// and counts vLLM's number of plain "<id>:<prefill TP>" completions.
func TestVLLMProtocolPush(t *testing.T) {
	for _, tc := range []struct{ pre, dec int }{{1, 1}, {2, 1}, {1, 2}, {2, 2}} {
		t.Run(fmt.Sprintf("tp%d-to-tp%d", tc.pre, tc.dec), func(t *testing.T) {
			r, taps := vllmRig(t, rigConfig{preTP: tc.pre, decTP: tc.dec})
			pblocks, dblocks := blocksFrom(3, 4), blocksFrom(20, 4)
			const tokens = 4*16 - 5
			for j := range tc.pre {
				fill(t, r.preLayout[j], pblocks, 9, tokens)
			}
			coords := Coordinates(r.pre)
			for _, c := range r.consumers {
				require.NoError(t, c.Register("cmpl-x-0-1a2b3c4d", coords, dblocks))
			}
			for _, p := range r.producers {
				params, err := p.RequestFinished("cmpl-x-0-9f8e7d6c", pblocks)
				require.NoError(t, err)
				assert.Empty(t, params.TransferID)
			}
			for k, c := range r.consumers {
				res := await(t, c, 1)
				require.NoError(t, res[0].Err, "decode rank %d", k)
				assert.Positive(t, check(t, r.decLayout[k], dblocks, 0, 9, tokens))
				want := vllm.PushCompletions(1, tc.pre, tc.dec)
				comps := taps[fmt.Sprintf("decode-%d", k)].received("cmpl-x-0-1a2b3c4d:")
				assert.Equal(t, slicesOf(want, fmt.Sprintf("cmpl-x-0-1a2b3c4d:%d", tc.pre)), comps, "decode rank %d: plain completions, vLLM's count", k)
			}
			for j, p := range r.producers {
				freedOnce(t, p, "cmpl-x-0-9f8e7d6c")
				// One registration per decode rank it writes into, each
				// paired by the id without its suffix.
				assert.Equal(t, uint64(max(1, tc.dec/tc.pre)), extra(t, p.Stats(), "matched_stripped"), "prefill rank %d", j)
			}
			// The wire: every PUSH_REG a prefill rank got is vLLM's, byte
			// for byte.
			regs := 0
			for j := range tc.pre {
				for _, got := range taps[fmt.Sprintf("prefill-%d", j)].received(pushwire.RegPrefix) {
					reg, err := pushwire.DecodeRegistration([]byte(got))
					require.NoError(t, err)
					want := vllmPushReg(t, map[string]any{
						"request_id": "cmpl-x-0-1a2b3c4d", "decode_engine_id": "decode", "decode_host": r.dec.Host(), "decode_port": r.dec.Port(),
						"decode_tp_size": tc.dec, "local_block_ids": [][]int{dblocks}, "remote_engine_id": "prefill", "remote_host": coords.Host,
						"remote_port": coords.Port, "remote_tp_size": tc.pre, "remote_pp_size": 1,
					})
					assert.Equal(t, string(want), got, "prefill rank %d", j)
					assert.Zero(t, reg.Seq)
					assert.Zero(t, reg.DecodeIncarnation)
					assert.Nil(t, reg.Staging)
					regs++
				}
			}
			// One per (decode rank, prefill rank that writes into it).
			assert.Equal(t, tc.dec*vllm.PushCompletions(1, tc.pre, tc.dec), regs)
			for name, tap := range taps {
				for _, prefix := range []string{pushwire.FailPrefix, pushwire.CancelPrefix, pushwire.CancelAckPrefix, pushwire.StagedPrefix} {
					assert.Empty(t, tap.sentWith(prefix), "%s sent a gonixl-only message", name)
				}
			}
		})
	}
}

func slicesOf(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// vllmTimings are short timeouts on the rig's manual clock.
func vllmTimings(c *Config) {
	c.StatsInterval = -1
	c.IdleInterval = time.Millisecond
}

// The registration watchdog is decode's only failure signal: prefill
// gives the registration up (at its shorter timeout) without a PUSH_FAIL,
// decode fails the request at its own timeout, and keeps the blocks until
// no WRITE can land: its registration timeout after the registration plus
// CancelTimeout.
func TestVLLMProtocolRegistrationWatchdog(t *testing.T) {
	r, taps := vllmRig(t, rigConfig{
		rank:    vllmTimings,
		preRank: func(c *Config) { c.RegistrationTimeout = 5 * time.Second },
		decRank: func(c *Config) { c.RegistrationTimeout, c.CancelTimeout = 10*time.Second, 3*time.Second },
	})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("req-w", Coordinates(r.pre), []int{4, 5}))
	admitted(t, p, 1)
	r.clock.Advance(5 * time.Second)
	eventually(t, "prefill gives the registration up", func() bool { return extra(t, p.Stats(), "push_fail_withheld") == 1 })
	assert.Equal(t, uint64(1), extra(t, p.Stats(), "unmatched_expired"))
	assert.Empty(t, taps["prefill-0"].sentWith(pushwire.FailPrefix), "no PUSH_FAIL in vLLM's protocol")

	r.clock.Advance(5 * time.Second) // decode's registration timeout
	eventually(t, "decode times out", func() bool { return extra(t, c.Stats(), "registration_timeouts") == 1 })
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, c.Drain(), "the blocks stay held: a WRITE could still land")
	assert.Equal(t, 1, c.Pending())
	r.clock.Advance(3*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, c.Drain())
	r.clock.Advance(time.Millisecond)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	assert.Equal(t, uint64(1), extra(t, c.Stats(), "write_bound_releases"))
	assert.Zero(t, extra(t, c.Stats(), "push_cancel_sent"))
}

// An abort in vLLM's protocol cannot be told to prefill: decode keeps the
// blocks, and when prefill finishes later and WRITEs into them, the
// completion (which NIXL delivers after the bytes) releases them; nothing
// lands after the Result is out. Without a completion the Result comes at
// the write bound.
func TestVLLMProtocolAbortHoldsBlocks(t *testing.T) {
	r, taps := vllmRig(t, rigConfig{
		rank:    vllmTimings,
		decRank: func(c *Config) { c.RegistrationTimeout, c.CancelTimeout = 10*time.Second, 3*time.Second },
	})
	c, p := r.consumers[0], r.producers[0]
	poison(t, r.decLayout[0], []int{7, 8, 9})
	fill(t, r.preLayout[0], []int{1, 2}, 4, 32)
	require.NoError(t, c.Register("req-a", Coordinates(r.pre), []int{7, 8}))
	admitted(t, p, 1)
	r.clock.Advance(time.Second)
	require.NoError(t, c.Abort("req-a"))
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, c.Drain(), "aborted, but prefill may still write")
	// Prefill had no cancel: it finishes and writes.
	_, err := p.RequestFinished("req-a", []int{1, 2})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	check(t, r.decLayout[0], []int{7, 8}, 0, 4, 32) // the WRITE landed before the release
	freedOnce(t, p, "req-a")
	assert.Zero(t, extra(t, c.Stats(), "write_bound_releases"), "released by the completion, not the bound")
	assert.Empty(t, taps["decode-0"].sentWith(pushwire.CancelPrefix))

	// No completion ever comes: the Result waits for the bound, counted
	// from the registration.
	require.NoError(t, c.Register("req-b", Coordinates(r.pre), []int{9}))
	admitted(t, p, 2)
	require.NoError(t, c.Abort("req-b"))
	r.clock.Advance(10*time.Second + 3*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, c.Drain())
	r.clock.Advance(time.Millisecond)
	res = await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	assert.Equal(t, uint64(1), extra(t, c.Stats(), "write_bound_releases"))
	assert.True(t, poisoned(t, r.decLayout[0], []int{9}))
}

// A completion that comes after decode's watchdog fired settles the rank:
// the bytes are in, nothing more will come, and the (failed) Result goes
// out then instead of at the bound.
func TestVLLMProtocolLateCompletion(t *testing.T) {
	r, _ := vllmRig(t, rigConfig{
		rank:    vllmTimings,
		preRank: func(c *Config) { c.RegistrationTimeout = 60 * time.Second },
		decRank: func(c *Config) { c.RegistrationTimeout, c.CancelTimeout = 2*time.Second, 3*time.Second },
	})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("req-l", Coordinates(r.pre), []int{3}))
	admitted(t, p, 1)
	r.clock.Advance(2 * time.Second)
	eventually(t, "decode times out", func() bool { return extra(t, c.Stats(), "registration_timeouts") == 1 })
	assert.Empty(t, c.Drain())
	_, err := p.RequestFinished("req-l", []int{6})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	freedOnce(t, p, "req-l")
	assert.Zero(t, extra(t, c.Stats(), "write_bound_releases"))
}

// vLLM's heartbeat keeps a finished request's blocks on prefill while they
// wait for their registration: the lease moves to now + 2/3 of it, never
// back; a malformed one is counted and changes nothing.
func TestVLLMProtocolHeartbeatExtendsLease(t *testing.T) {
	r, _ := vllmRig(t, rigConfig{rank: func(c *Config) { vllmTimings(c); c.Lease = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	// A first request, so the decode agent knows prefill's.
	require.NoError(t, c.Register("warm", Coordinates(r.pre), []int{1}))
	_, err := p.RequestFinished("warm", []int{1})
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
	freedOnce(t, p, "warm")

	_, err = p.RequestFinished("held", []int{2})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // the writer has it waiting for its registration
	r.clock.Advance(2 * time.Second)
	hb, err := notif.EncodeHeartbeat([]string{"other", "held"})
	require.NoError(t, err)
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), hb, nil))
	eventually(t, "lease extended", func() bool { return extra(t, p.Stats(), "lease_extensions") == 1 })
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), []byte("HB:"), nil))
	eventually(t, "malformed heartbeat counted", func() bool { return p.Stats().MalformedNotifications == 1 })
	r.clock.Advance(1500 * time.Millisecond) // past the lease, inside the extension (until 4 s)
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, p.DrainFreed())
	assert.Equal(t, 1, p.Held())
	r.clock.Advance(600 * time.Millisecond)
	freedOnce(t, p, "held")
	assert.Equal(t, uint64(1), p.Stats().ExpiredRequests)
}

// gonixl's own options and messages are dropped or ignored in vLLM's
// protocol: a transfer id (gonixl's proxy sends one) is neither sent nor
// matched on, so two requests whose transfer ids differ still pair by
// their ids; PUSH_CANCEL and PUSH_FAIL are counted and change nothing.
func TestVLLMProtocolIgnoresGonixlOnly(t *testing.T) {
	r, taps := vllmRig(t, rigConfig{rank: vllmTimings})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("x-1a2b3c4d", Coordinates(r.pre), []int{1}, withTransferID("t1")))
	params, err := p.RequestFinished("x-9f8e7d6c", []int{2}, withTransferID("t2"))
	require.NoError(t, err)
	assert.Empty(t, params.TransferID)
	require.NoError(t, await(t, c, 1)[0].Err)
	for _, reg := range taps["prefill-0"].received(pushwire.RegPrefix) {
		assert.NotContains(t, reg, "transfer_id")
	}
	freedOnce(t, p, "x-9f8e7d6c")

	// A PUSH_CANCEL or PUSH_FAIL is not part of the protocol: counted,
	// nothing changes.
	require.NoError(t, c.Register("warm", Coordinates(r.pre), []int{1}))
	admitted(t, p, 2)
	cancel, err := pushwire.EncodeCancel(&pushwire.Cancel{RequestID: "warm", EngineID: "decode"})
	require.NoError(t, err)
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), cancel, nil))
	eventually(t, "cancel counted", func() bool { return p.Stats().UnknownNotifications == 1 })
	assert.Zero(t, extra(t, p.Stats(), "push_cancel_received"))
	fail, err := pushwire.EncodeFailure(&pushwire.Failure{RequestID: "warm", EngineID: "prefill", Kind: pushwire.FailExpired, Reason: "x"})
	require.NoError(t, err)
	require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), fail, nil))
	eventually(t, "PUSH_FAIL counted", func() bool { return c.Stats().UnknownNotifications == 1 })
	assert.Equal(t, 1, c.Pending(), "the request still waits")
	_, err = p.RequestFinished("warm", []int{1})
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
}

// Staging is gonixl's own: a rank that asks for it is refused, naming the
// field.
func TestVLLMProtocolStagingRefused(t *testing.T) {
	g := testGeometry(1, 16, numBlocks)
	g.KVPacked = true
	e, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM})
	require.NoError(t, err)
	defer e.Close()
	m := newStagingMem(t, connector.StagingOn, 2, 1<<15)
	r, _ := vllmRig(t, rigConfig{noProducers: true, rank: vllmTimings})
	l := packedLayout(t, 1, 0, 16, numBlocks)
	defer freeLayout(l)
	a, err := r.fabric.NewAgent("lone")
	require.NoError(t, err)
	defer a.Close()
	cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}}
	m.rank("prefill")(&cfg)
	_, err = NewProducer(e, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, `pushconn: invalid argument: RankConfig.Staging.Mode is "on": staging is gonixl's own protocol, and this engine speaks vLLM's`)
}

// A push decode's handshake with a pull engine in vLLM's protocol fails
// the request with ErrIncompatible, both hashes named: the transfer mode
// is one of the hash's factors, so both peers must be push.
func TestVLLMProtocolRefusesPullPeer(t *testing.T) {
	r, _ := vllmRig(t, rigConfig{noProducers: true, rank: vllmTimings})
	g := testGeometry(1, 16, numBlocks)
	g.KVPacked = true
	e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM})
	require.NoError(t, err)
	defer e.Close()
	l := packedLayout(t, 1, 0, 16, numBlocks)
	defer freeLayout(l)
	a, err := r.fabric.NewAgent("prefill-x")
	require.NoError(t, err)
	defer a.Close()
	p, err := pullconn.NewProducer(e, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}})
	require.NoError(t, err)
	defer p.Close()
	pf := Prefill{EngineID: "prefill", Host: e.Host(), Port: e.Port(), TPSize: 1, PPSize: 1}
	require.NoError(t, r.consumers[0].Register("q", pf, []int{1}))
	res := await(t, r.consumers[0], 1)
	require.ErrorIs(t, res[0].Err, connector.ErrIncompatible)
	assert.Contains(t, res[0].Err.Error(), "hash")
	assert.Equal(t, uint64(1), r.consumers[0].Stats().FailedHandshakes)
}

// TestFaultCampaignVLLM is the fault campaign with both engines in vLLM's
// protocol: the same faults (failed posts and transfers, dropped and
// delayed notifications, disconnects), duplicated registrations, aborts on
// either side, retries, lapsed leases and a prefill rank closing, with no
// PUSH_FAIL, no PUSH_CANCEL and no seq. Every done result's bytes are
// checked and every block decode gets back is poisoned, so a WRITE after
// the release shows. Left out, as the protocol cannot defend them: reusing
// the ids of a request that ended done while late copies of its plain
// completions arrive (docs/vllm.md). GONIXL_CAMPAIGN=long runs 5 seeds x
// 2000 requests per pairing.
func TestFaultCampaignVLLM(t *testing.T) {
	seeds, n := 1, 300
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	if testing.Short() {
		n = 100
	}
	start := time.Now()
	var total campaignFigures
	for _, tp := range [][2]int{{2, 2}, {2, 1}, {1, 2}, {1, 1}} {
		for s := range seeds {
			seed := uint64(7000 + 100*tp[0] + 10*tp[1] + s)
			t.Run(fmt.Sprintf("tp%dto%d/seed%d", tp[0], tp[1], seed), func(t *testing.T) {
				f := runCampaignWith(t, seed, n, tp[0], tp[1], campaignOpts{vllm: true})
				t.Logf("seed %d: %+v", seed, f)
				total.add(f)
			})
		}
	}
	t.Logf("push vLLM-protocol campaign total: %d requests (%d seeds x %d x 4 pairings, %d retries, %d PUSH_REG copies) in %v: %d done, %d failed (%d aborted), %d wrong-byte done results, %d writes after release, %d results or frees twice, %d missing",
		total.requests, seeds, n, total.retries, total.regCopies, time.Since(start).Round(time.Millisecond), total.done, total.failed, total.aborted,
		total.wrongBytes, total.writesAfterRelease, total.decodeResultsTwice+total.prefillFreeTwice, total.missingResults+total.missingFrees)
	require.Zero(t, total.wrongBytes, "done results with a wrong byte")
	require.Zero(t, total.writesAfterRelease, "writes into blocks after their release")
	require.Zero(t, total.decodeResultsTwice+total.prefillFreeTwice, "ended or freed twice")
	require.Zero(t, total.missingResults+total.missingFrees, "never ended or never freed")
	require.Positive(t, total.done, "nothing was pushed")
	require.Positive(t, total.regCopies, "no PUSH_REG copies")
}

// The tracker in vLLM's protocol owes no PUSH_CANCEL: a failed request
// drains until every rank that got the registration wrote, or until the
// registration timeout after the registration plus the cancel timeout,
// never before now plus the cancel timeout.
func TestTrackerVLLMWriteBound(t *testing.T) {
	tr := newTracker(10*time.Second, 3*time.Second)
	tr.noCancel = true
	t0 := rigStart
	// One clock for wall and monotonic readings: steps are another test's.
	both := func(at time.Time) instant { return instant{wall: at, mono: at} }
	add := func(id string, at time.Time, agents ...string) *decodeReq {
		r := &decodeReq{id: id, blocks: [][]int{{1}}}
		require.NoError(t, tr.add(both(at), r))
		require.True(t, tr.expect(both(at), r, agents))
		r.regAt = at.Add(time.Second) // sent after a one-second handshake
		for _, a := range agents {
			tr.sent(r, a)
		}
		return r
	}
	add("early", t0, "p0", "p1")
	require.True(t, tr.fail(both(t0.Add(2*time.Second)), "early", errAborted))
	add("late", t0, "p0")
	require.True(t, tr.fail(both(t0.Add(20*time.Second)), "late", errAborted))
	require.Empty(t, tr.takeCancels(), "vLLM's protocol has no PUSH_CANCEL")
	require.Empty(t, tr.drain())

	_, gaveUp := tr.expire(both(t0.Add(14*time.Second - time.Nanosecond)))
	require.Zero(t, gaveUp)
	_, gaveUp = tr.expire(both(t0.Add(14 * time.Second))) // regAt 1 s + 10 s + 3 s
	require.Equal(t, 1, gaveUp)
	res := tr.drain()
	require.Len(t, res, 1)
	require.Equal(t, "early", res[0].RequestID)
	// "late" failed after its registration timeout: now + cancel timeout.
	_, gaveUp = tr.expire(both(t0.Add(23*time.Second - time.Nanosecond)))
	require.Zero(t, gaveUp)
	require.Equal(t, arrivalReleased, tr.complete(both(t0.Add(22*time.Second)), "late", "p0", 0), "its completion releases it first")
	require.Equal(t, "late", tr.drain()[0].RequestID)
	require.Zero(t, tr.pending())
}

// In vLLM's protocol a prefill rank WRITEs into every decode rank it
// targets on the first registration of the request it gets, from whichever
// decode rank (push_worker.py@0.34.0): a completion may reach this rank
// before its own registration went out. It counts: kept while the prefill
// engine's handshake runs, then for the agent it came from once the
// sources are known; one from an agent that does not write here counts
// nothing; a request written whole so ends without a registration to send.
// In gonixl's protocol the same completion is a stranger's.
func TestTrackerSiblingRegistrationCompletions(t *testing.T) {
	both := func(at time.Time) instant { return instant{wall: at, mono: at} }
	t0 := rigStart
	newVLLM := func() *tracker {
		tr := newTracker(10*time.Second, 3*time.Second)
		tr.noCancel, tr.siblings = true, true
		return tr
	}

	// Before the handshake: kept, then counted.
	tr := newVLLM()
	r := &decodeReq{id: "a", blocks: [][]int{{1}}}
	require.NoError(t, tr.add(both(t0), r))
	require.Equal(t, arrivalEarly, tr.complete(both(t0), "a", "p0", 0))
	require.Equal(t, arrivalEarly, tr.complete(both(t0), "a", "p0", 0), "a copy is kept once")
	require.Equal(t, arrivalEarly, tr.complete(both(t0), "a", "stranger", 0))
	require.True(t, tr.expect(both(t0), r, []string{"p0", "p1"}), "p1 has not written: send")
	require.Equal(t, srcWritten, r.sources["p0"])
	require.Equal(t, srcUnsent, r.sources["p1"])
	require.NotContains(t, r.sources, "stranger")
	tr.sent(r, "p1")
	require.Equal(t, arrivalDone, tr.complete(both(t0), "a", "p1", 0))
	res := tr.drain()
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)

	// Every source wrote before the handshake: done, nothing to send.
	r = &decodeReq{id: "b", blocks: [][]int{{1}}}
	require.NoError(t, tr.add(both(t0), r))
	require.Equal(t, arrivalEarly, tr.complete(both(t0), "b", "p0", 0))
	require.False(t, tr.expect(both(t0), r, []string{"p0"}))
	res = tr.drain()
	require.Len(t, res, 1)
	require.Equal(t, "b", res[0].RequestID)
	require.NoError(t, res[0].Err)

	// Sources known, the registration not yet sent to that agent.
	r = &decodeReq{id: "c", blocks: [][]int{{1}}}
	require.NoError(t, tr.add(both(t0), r))
	require.True(t, tr.expect(both(t0), r, []string{"p0"}))
	require.Equal(t, arrivalDone, tr.complete(both(t0), "c", "p0", 0))
	require.Len(t, tr.drain(), 1)
	require.Zero(t, tr.pending())

	// gonixl's protocol: a stranger's, whatever the state.
	g := newTracker(10*time.Second, 3*time.Second)
	r = &decodeReq{id: "d", blocks: [][]int{{1}}, seq: 7}
	require.NoError(t, g.add(both(t0), r))
	require.Equal(t, arrivalStranger, g.complete(both(t0), "d", "p0", 7))
	require.True(t, g.expect(both(t0), r, []string{"p0"}))
	require.Equal(t, arrivalStranger, g.complete(both(t0), "d", "p0", 7))
	require.Empty(t, g.drain())
}
