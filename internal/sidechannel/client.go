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

// errClosedBeforeReply marks a call whose connection the server closed
// (end of stream, reset, broken pipe) before the first byte of its reply:
// the one failure a kept connection is retried after.
var errClosedBeforeReply = errors.New("the server closed the connection without replying")

// closedByPeer reports whether err is the peer closing the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// closedHint explains a connection the server closed: before replying, it
// does so when it serves MaxConns connections already, or when it found the
// request malformed or too large (a kept connection's idle timeout is
// retried by CallPooled and so rarely shows here).
func closedHint(err error, beforeReply bool) error {
	switch {
	case !closedByPeer(err):
		return err
	case beforeReply:
		return fmt.Errorf("%w (is it serving too many connections, or did it refuse the request?): %w", errClosedBeforeReply, err)
	default:
		return fmt.Errorf("the server closed the connection in the middle of its reply: %w", err)
	}
}

// exchange writes one frame and reads one, within ctx. A failure before
// any byte of the reply arrived matches errClosedBeforeReply when the peer
// closed the connection.
func exchange(ctx context.Context, c net.Conn, addr string, body []byte, maxFrame int) ([]byte, error) {
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("sidechannel: %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := WriteFrame(c, body, maxFrame); err != nil {
		return nil, fmt.Errorf("sidechannel: send to %s: %w", addr, ctxErr(ctx, closedHint(err, true)))
	}
	r := &countingReader{r: c}
	reply, err := ReadFrame(r, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("sidechannel: reply from %s: %w", addr, ctxErr(ctx, closedHint(err, r.n == 0)))
	}
	return reply, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
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
