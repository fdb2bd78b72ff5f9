package vllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// vLLM's NIXL side channel: each engine (one per data-parallel rank) runs
// one ZMQ ROUTER, bound on VLLM_NIXL_SIDE_CHANNEL_HOST at
// VLLM_NIXL_SIDE_CHANNEL_PORT + its data-parallel index, that answers
// GET_META_MSG requests for the handshake payload of one (pp, tp) rank; an
// initiator connects a REQ, asks for each rank it needs in turn on that one
// socket, and derives a clock offset from the replies' timestamps.

const (
	// DefaultSidePort is VLLM_NIXL_SIDE_CHANNEL_PORT's default, the base
	// port: an engine listens on SidePort(base, its data-parallel index).
	DefaultSidePort = 5600
	// DefaultSideHost is VLLM_NIXL_SIDE_CHANNEL_HOST's default.
	DefaultSideHost = "localhost"
	// DefaultSideTimeout is how long a vLLM initiator waits for each reply
	// (its REQ's RCVTIMEO, 5000 ms).
	DefaultSideTimeout = 5 * time.Second
	// DefaultSideMaxPayload bounds a reply frame a client accepts.
	DefaultSideMaxPayload = 64 << 20
	// DefaultSideMaxRequest bounds a frame a SideServer accepts; a vLLM
	// request is 17 bytes for ranks below 128.
	DefaultSideMaxRequest = 4 << 10
	// DefaultSideMaxPeers bounds a SideServer's connections.
	DefaultSideMaxPeers = 256
)

// ErrSide is wrapped by every error of the side channel's server and client.
var ErrSide = errors.New("vllm side channel")

// SidePort is the side-channel port of the engine with data-parallel index
// dpIndex: base (VLLM_NIXL_SIDE_CHANNEL_PORT, DefaultSidePort) + dpIndex.
// TP and PP ranks share their engine's port.
func SidePort(base, dpIndex int) int { return base + dpIndex }

var sideClockStart = time.Now()

// SideClock is the default engine clock of the side channel: seconds since
// this package was initialised, read from Go's monotonic clock. vLLM
// stamps its replies and its block-expiry deadlines with Python's
// time.perf_counter(), also monotonic (CLOCK_MONOTONIC on Linux), and peers
// only ever use the difference between two engines' clocks (the offset
// FetchRanks measures), never its epoch. The clock must be monotonic so
// that this difference holds still: a wall clock stepped by NTP or an
// operator would shift every deadline converted with an offset measured
// before the step. Deadlines an engine exports must be read from the same
// clock its SideServer stamps (SideOptions.Now).
func SideClock() float64 { return time.Since(sideClockStart).Seconds() }

// SideOptions configures a SideServer. Zero fields take the defaults.
type SideOptions struct {
	// Now is the engine clock stamped into each reply; default SideClock.
	Now func() float64
	// OnMalformed is called, from the server's goroutines and possibly
	// concurrently, with each request or connection the server drops
	// without a reply: a frame count other than [identity, empty, request],
	// an undecodable request, a (pp, tp) with no payload, a frame over
	// MaxRequest, a failed ZMTP handshake, a connection over MaxPeers, a
	// reply that could not be written. It must not block. Each call is
	// also counted in SideStats.Dropped.
	OnMalformed func(error)
	// MaxRequest bounds each frame a peer sends (default
	// DefaultSideMaxRequest); a larger one closes its connection.
	MaxRequest int
	// MaxPeers bounds the connections open at once, handshaking or not
	// (default DefaultSideMaxPeers); more are closed as they arrive.
	MaxPeers int
	// HandshakeTimeout bounds a connection's ZMTP handshake (default 5 s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long
	// (default 60 s). vLLM's initiator closes its socket after its
	// handshake, and libzmq reconnects a closed REQ by itself.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of a reply (default 5 s, the time a
	// vLLM initiator waits for it); a peer that does not read is closed.
	WriteTimeout time.Duration
}

func (o SideOptions) withDefaults() SideOptions {
	if o.Now == nil {
		o.Now = SideClock
	}
	if o.MaxRequest <= 0 {
		o.MaxRequest = DefaultSideMaxRequest
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultSideMaxPeers
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	return o
}

// SideStats counts a SideServer's work.
type SideStats struct {
	Served  uint64 // replies sent
	Dropped uint64 // requests and connections dropped (SideOptions.OnMalformed)
	Peers   int    // connections open now
}

// SideServer is an engine's side-channel listener: a ZMQ ROUTER that
// answers each GET_META_MSG request, [bin "get_meta_msg", pp, tp], with two
// frames after the REQ envelope: the payload registered for (pp, tp) and a
// msgpack float64 of the engine clock (SideOptions.Now).
//
// Unlike vLLM's listener, which dies on a malformed request or an unknown
// rank, a SideServer never stops for what a peer sends: whatever it cannot
// answer it drops, without a reply, and counts (SideOptions.OnMalformed).
// Dropping is what suits a vLLM peer: its REQ accepts exactly the 2 frames
// [payload, timestamp] and decodes the first as a NixlHandshakePayload, so
// any other reply would be misread as a corrupt payload, and a reply cannot
// be framed at all for a request without the REQ envelope. The peer's REQ
// times out instead (5 s), which vLLM reports as a failed handshake and
// retries with a later request. Register every rank's payload before
// advertising the server: a request for a rank not registered yet is
// dropped like one for a rank that does not exist.
type SideServer struct {
	opts SideOptions
	// addr is ip:port, bound; set again once the port is known, while
	// the accept loop may already read it for its errors.
	addr   atomic.Pointer[string]
	port   int
	sock   zmq4.Socket
	ln     *sideListener // set by sideTransport.Listen
	cancel context.CancelFunc
	tokens chan struct{}
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu       sync.RWMutex
	payloads map[[2]int][]byte
	// generation counts the payload changes (SetPayload).
	generation int

	served, dropped atomic.Uint64
}

// ListenSide binds a SideServer on tcp://host:port. host is resolved to an
// IP literal first (an IPv4 address when it has one), because libzmq cannot
// bind tcp://localhost:N (it reads a name there as an interface: "No such
// device"); "" and "*" bind every IPv4 interface. Port 0 picks a free port,
// which Port reports.
func ListenSide(host string, port int, opts SideOptions) (*SideServer, error) {
	if err := sideRegister(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSide, err)
	}
	ip, err := sideBindIP(host)
	if err != nil {
		return nil, fmt.Errorf("%w: listen on %s: %w", ErrSide, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	s := newSideServer(opts)
	s.setAddr(net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), sideCtxKey{}, s))
	s.cancel = cancel
	s.sock = zmq4.NewRouter(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	if err := s.sock.Listen(sideScheme + "://" + s.where()); err != nil {
		_ = s.sock.Close()
		cancel()
		if cause := errors.Unwrap(err); cause != nil {
			err = cause // zmq4's "could not listen" wrapping names the endpoint with our scheme
		}
		return nil, fmt.Errorf("%w: listen on %s (%s): %w", ErrSide, net.JoinHostPort(host, strconv.Itoa(port)), s.where(), err)
	}
	s.port = s.ln.Addr().(*net.TCPAddr).Port
	s.setAddr(net.JoinHostPort(ip.String(), strconv.Itoa(s.port)))
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// newSideServer is a server without a socket: what ListenSide builds on,
// and what the fuzz target drives.
func newSideServer(opts SideOptions) *SideServer {
	s := &SideServer{
		opts:     opts.withDefaults(),
		tokens:   make(chan struct{}, sideQueueTokens),
		done:     make(chan struct{}),
		payloads: map[[2]int][]byte{},
	}
	for range sideQueueTokens {
		s.tokens <- struct{}{}
	}
	return s
}

func sideBindIP(host string) (netip.Addr, error) {
	switch host {
	case "", "*":
		return netip.IPv4Unspecified(), nil
	}
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		return ip.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), nil
		}
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %q: no addresses", host)
	}
	return ips[0], nil
}

// Addr is the bound address, ip:port (IPv6 in brackets).
func (s *SideServer) Addr() string { return s.where() }

func (s *SideServer) setAddr(a string) { s.addr.Store(&a) }

// where is the bound address, for errors and Addr.
func (s *SideServer) where() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Port is the bound port.
func (s *SideServer) Port() int { return s.port }

// SetPayload registers (a copy of) the handshake payload answered for rank
// (pp, tp), replacing any earlier one; the side channel does not look into
// it (vLLM's is a msgpack NixlHandshakePayload).
//
// A payload that differs from the one the rank had (a first one
// included) moves the registration generation on, as vLLM's scheduler
// counts it (set_xfer_handshake_metadata in nixl/base_scheduler.py at
// vllm 0.34.0): peers that see a higher generation in a request's
// kv_transfer_params handshake again.
func (s *SideServer) SetPayload(pp, tp int, payload []byte) {
	p := append(make([]byte, 0, len(payload)), payload...)
	s.mu.Lock()
	if old, ok := s.payloads[[2]int{pp, tp}]; !ok || !bytes.Equal(old, p) {
		s.generation++
	}
	s.payloads[[2]int{pp, tp}] = p
	s.mu.Unlock()
}

// Generation returns the registration generation: how many times a rank's
// payload was set to other bytes than it had (remote_registration_generation
// from connector version 15 on).
func (s *SideServer) Generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// ClearPayload unregisters rank (pp, tp): its requests are dropped from now on.
func (s *SideServer) ClearPayload(pp, tp int) {
	s.mu.Lock()
	delete(s.payloads, [2]int{pp, tp})
	s.mu.Unlock()
}

// Stats returns the server's counters.
func (s *SideServer) Stats() SideStats {
	st := SideStats{Served: s.served.Load(), Dropped: s.dropped.Load()}
	if s.ln != nil {
		st.Peers = s.ln.peers()
	}
	return st
}

// Close stops the server: it closes the socket and every connection and
// returns once the server's goroutines are done. Calls after the first do
// nothing.
func (s *SideServer) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
		_ = s.sock.Close()
		if s.ln != nil {
			_ = s.ln.Close()
		}
		s.wg.Wait()
	})
	return nil
}

func (s *SideServer) drop(err error) {
	s.dropped.Add(1)
	if s.opts.OnMalformed != nil {
		s.opts.OnMalformed(err)
	}
}

func (s *SideServer) serve() {
	defer s.wg.Done()
	for {
		msg, err := s.sock.Recv()
		select {
		case <-s.done:
			return
		default:
		}
		if err != nil {
			// zmq4 reports errors here only once the socket is closing.
			s.drop(fmt.Errorf("%w: %s: receive: %w", ErrSide, s.where(), err))
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case s.tokens <- struct{}{}:
		default:
		}
		reply, err := s.answer(msg.Frames, msg.Type != zmq4.UsrMsg)
		if err != nil {
			s.drop(err)
			continue
		}
		if err := s.sock.SendMulti(zmq4.NewMsgFrom(reply...)); err != nil {
			s.drop(fmt.Errorf("%w: %s: reply to %s: %w", ErrSide, s.where(), s.peer(reply[0]), err))
			continue
		}
		s.served.Add(1)
	}
}

func (s *SideServer) peer(id []byte) string {
	if s.ln == nil {
		return fmt.Sprintf("peer %q", id)
	}
	return s.ln.peer(id)
}

// answer is the reply, [identity, empty, payload, timestamp], to a message
// zmq4's ROUTER delivered as frames, [identity, frames the peer sent...];
// or why it gets none.
func (s *SideServer) answer(frames [][]byte, command bool) ([][]byte, error) {
	if len(frames) == 0 {
		return nil, fmt.Errorf("%w: %s: a message without a routing identity", ErrSide, s.where())
	}
	from := s.peer(frames[0])
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: request from %s: %s (dropped)", ErrSide, s.where(), from, fmt.Sprintf(format, args...))
	}
	switch {
	case command:
		return nil, bad("a ZMTP command where a request was due")
	case len(frames) != 3:
		return nil, bad("%d frames, want 2 (an empty delimiter, then the request: a REQ socket's envelope)", len(frames)-1)
	case len(frames[1]) != 0:
		return nil, bad("first frame of %d bytes, want the empty delimiter of a REQ envelope", len(frames[1]))
	case len(frames[2]) > s.opts.MaxRequest:
		return nil, bad("request of %d bytes, over the %d-byte limit (oversize)", len(frames[2]), s.opts.MaxRequest)
	}
	pp, tp, err := DecodeMetaRequest(frames[2])
	if err != nil {
		return nil, bad("%v", err)
	}
	s.mu.RLock()
	payload, ok := s.payloads[[2]int{pp, tp}]
	s.mu.RUnlock()
	if !ok {
		return nil, bad("pp %d tp %d: no payload registered for that rank", pp, tp)
	}
	return [][]byte{frames[0], {}, payload, EncodeTimestamp(s.opts.Now())}, nil
}
