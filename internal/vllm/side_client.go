package vllm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-zeromq/zmq4"
)

// SideRank names one worker of an engine: its pipeline- and tensor-parallel
// ranks, the key a SideServer answers for.
type SideRank struct{ PP, TP int }

// SideFetchOptions configures FetchSide and FetchRanks. Zero fields take
// the defaults.
type SideFetchOptions struct {
	// Timeout bounds each round trip (default DefaultSideTimeout, 5 s as
	// vLLM's REQ RCVTIMEO); the first one includes connecting, which is
	// retried every 100 ms (libzmq's reconnect interval) within it.
	Timeout time.Duration
	// MaxPayload bounds each reply frame (default DefaultSideMaxPayload);
	// a larger one fails the fetch before it is read.
	MaxPayload int
	// Now is the local clock the offset is measured against (default
	// SideClock); use the clock the local engine stamps its own deadlines
	// and replies with.
	Now func() float64
}

// SideReply is one rank's answer.
type SideReply struct {
	Rank    SideRank
	Payload []byte // the handshake payload, as the peer registered it
	// RemoteTS is the peer's engine clock when it answered, in seconds
	// (vLLM: time.perf_counter() in its scheduler process; a SideServer:
	// SideOptions.Now).
	RemoteTS float64
	// Sent and Recv are read just before the request was sent and just
	// after the reply arrived; their monotonic difference is the RTT.
	Sent, Recv time.Time
	// LocalMid is the local clock (SideFetchOptions.Now) halfway through
	// the round trip: the mean of its readings at Sent and at Recv.
	LocalMid float64
}

// RTT is the reply's round-trip time (connection setup excluded).
func (r SideReply) RTT() time.Duration { return r.Recv.Sub(r.Sent) }

// Offset is RemoteTS - LocalMid, in seconds: how far the peer's engine
// clock is ahead of the local clock, assuming the request and the reply
// took equally long (off by at most RTT/2). A peer clock reading T (a
// deadline it exported) is local clock T - Offset. It relates two monotonic
// clocks with arbitrary epochs (vLLM's perf_counter, SideClock), so it can
// be anything, and holds for as long as neither process restarts.
func (r SideReply) Offset() float64 { return r.RemoteTS - r.LocalMid }

// SideHandshake is the result of FetchRanks: every reply, in the order
// asked, and which one had the lowest RTT, the sample vLLM takes the clock
// offset from.
type SideHandshake struct {
	Replies []SideReply
	Best    int // index in Replies of the lowest-RTT reply
}

// Offset is the clock offset of the lowest-RTT reply (SideReply.Offset), as
// vLLM's initiator keeps it per remote engine.
func (h SideHandshake) Offset() float64 { return h.Replies[h.Best].Offset() }

// FetchSide asks the side channel at host:port for rank (pp, tp)'s
// handshake payload, on a REQ socket of its own (FetchRanks with one rank).
func FetchSide(ctx context.Context, host string, port, pp, tp int, opts SideFetchOptions) (SideReply, error) {
	h, err := FetchRanks(ctx, host, port, []SideRank{{pp, tp}}, opts)
	if err != nil {
		return SideReply{}, err
	}
	return h.Replies[0], nil
}

// FetchRanks asks the side channel at host:port for each rank's handshake
// payload in turn, on one REQ socket, as vLLM's initiator does: one frame
// (msgpack [bin "get_meta_msg", pp, tp]) out, exactly two frames (payload,
// msgpack timestamp) back per rank, each round trip within opts.Timeout.
// The first failure ends it; the error wraps ErrSide and names host:port,
// the rank and what failed (with context.DeadlineExceeded for a timeout),
// and the replies so far are returned with it. The socket is closed on
// return, discarding anything unsent (libzmq's linger 0).
func FetchRanks(ctx context.Context, host string, port int, ranks []SideRank, opts SideFetchOptions) (SideHandshake, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if len(ranks) == 0 {
		return SideHandshake{}, fmt.Errorf("%w: fetch from %s: no ranks to ask for", ErrSide, addr)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultSideTimeout
	}
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = DefaultSideMaxPayload
	}
	if opts.Now == nil {
		opts.Now = SideClock
	}
	if err := sideRegister(); err != nil {
		return SideHandshake{}, fmt.Errorf("%w: %w", ErrSide, err)
	}
	fail := func(r SideRank, what string, cause error) error {
		if what == "" {
			return fmt.Errorf("%w: fetch from %s pp %d tp %d: %w", ErrSide, addr, r.PP, r.TP, cause)
		}
		if cause == nil {
			return fmt.Errorf("%w: fetch from %s pp %d tp %d: %s", ErrSide, addr, r.PP, r.TP, what)
		}
		return fmt.Errorf("%w: fetch from %s pp %d tp %d: %s: %w", ErrSide, addr, r.PP, r.TP, what, cause)
	}
	d := &sideDial{maxFrame: uint64(opts.MaxPayload), deadline: time.Now().Add(opts.Timeout)}
	sctx, cancel := context.WithCancel(context.WithValue(ctx, sideCtxKey{}, d))
	defer cancel()
	stop := context.AfterFunc(ctx, d.abort)
	defer stop()
	sock := zmq4.NewReq(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer func() {
		d.abort()
		_ = sock.Close()
	}()
	// why explains a failed send or receive.
	why := func(r SideRank, what string, err error) error {
		var big errSideTooLarge
		switch {
		case ctx.Err() != nil:
			return fail(r, what, ctx.Err())
		case errors.As(err, &big):
			return fail(r, "reply "+big.Error(), nil)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fail(r, fmt.Sprintf("no reply within %v (timeout)", opts.Timeout), context.DeadlineExceeded)
		}
		return fail(r, what, err)
	}
	if err := sock.Dial(sideScheme + "://" + addr); err != nil {
		r := ranks[0]
		if ctx.Err() != nil {
			return SideHandshake{}, fail(r, "connect", ctx.Err())
		}
		d.mu.Lock()
		derr, timedOut := d.err, d.timedOut
		d.mu.Unlock()
		if derr == nil {
			derr = err
		}
		if timedOut {
			return SideHandshake{}, fail(r, fmt.Sprintf("no connection within %v (timeout)", opts.Timeout), sideTimeout{derr})
		}
		return SideHandshake{}, fail(r, "", derr)
	}
	var h SideHandshake
	for i, r := range ranks {
		if i > 0 {
			d.setDeadline(time.Now().Add(opts.Timeout))
		}
		req := EncodeMetaRequest(r.PP, r.TP)
		l0, t0 := opts.Now(), time.Now()
		if err := sock.SendMulti(zmq4.NewMsg(req)); err != nil {
			return h, why(r, "send", err)
		}
		var msg zmq4.Msg
		for {
			m, err := sock.Recv()
			if err != nil {
				return h, why(r, "receive", err)
			}
			if m.Type == zmq4.UsrMsg {
				msg = m
				break
			}
			// A ZMTP command (a PING): not the reply.
		}
		t1, l1 := time.Now(), opts.Now()
		if len(msg.Frames) != 2 {
			return h, fail(r, fmt.Sprintf("reply has %d frames, want 2 (payload, timestamp) (frame count)", len(msg.Frames)), nil)
		}
		ts, err := DecodeTimestamp(msg.Frames[1])
		if err != nil {
			return h, fail(r, "timestamp frame", err)
		}
		h.Replies = append(h.Replies, SideReply{
			Rank: r, Payload: msg.Frames[0], RemoteTS: ts,
			Sent: t0, Recv: t1, LocalMid: (l0 + l1) / 2,
		})
		if h.Replies[i].RTT() < h.Replies[h.Best].RTT() {
			h.Best = i
		}
	}
	return h, nil
}

// sideTimeout is err, which happened because a deadline passed: it also
// matches context.DeadlineExceeded.
type sideTimeout struct{ err error }

func (e sideTimeout) Error() string   { return e.err.Error() }
func (e sideTimeout) Unwrap() []error { return []error{e.err, context.DeadlineExceeded} }
