package sidechannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Call dials addr, sends req as one frame, reads one reply frame into a
// Resp, and closes the connection. Every step obeys ctx's deadline; without
// one, Call applies fallback so that it never waits forever.
func Call[Req, Resp any](ctx context.Context, addr string, req Req, maxFrame int, fallback time.Duration) (Resp, error) {
	var zero Resp
	ctx, cancel, body, maxFrame, err := prepare(ctx, req, maxFrame, fallback)
	defer cancel()
	if err != nil {
		return zero, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return zero, fmt.Errorf("sidechannel: dial %s: %w", addr, err)
	}
	defer c.Close()
	reply, err := exchange(ctx, c, addr, body, maxFrame)
	if err != nil {
		return zero, err
	}
	return decodeReply[Resp](reply, addr)
}

// prepare encodes req and gives ctx the fallback deadline when it has
// none, so that no call waits forever.
func prepare[Req any](ctx context.Context, req Req, maxFrame int, fallback time.Duration) (context.Context, context.CancelFunc, []byte, int, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, fallback)
	}
	body, err := Encode(req)
	return ctx, cancel, body, maxFrame, err
}

func decodeReply[Resp any](reply []byte, addr string) (Resp, error) {
	var resp Resp
	if err := Decode(reply, &resp); err != nil {
		return resp, fmt.Errorf("sidechannel: reply from %s: %w", addr, err)
	}
	return resp, nil
}

// closedHint explains a connection the server closed without a reply: it
// does so when it serves MaxConns connections already, or when it found the
// request malformed or too large.
func closedHint(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("the server closed the connection without replying (is it serving too many connections, or did it refuse the request?): %w", err)
	}
	return err
}

// ctxErr prefers the context's reason (deadline, cancel) over the I/O
// error it caused.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	// The connection's deadline is ctx's and may fire a moment before
	// ctx itself reports it.
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}
