package vllmpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// clockStart anchors the peer's monotonic clock, its time.perf_counter():
// the timestamp frame and the deadlines stamped by the peer are on it.
var clockStart = time.Now()

// monotonic returns the peer's monotonic clock in seconds.
func monotonic() float64 { return time.Since(clockStart).Seconds() }

// listener is the side channel as vLLM's scheduler runs it: one ROUTER,
// bound, that answers GET_META_MSG for every (pp, tp) rank of the engine.
type listener struct {
	sock     zmq4.Socket
	host     string
	port     int
	payloads map[[2]int][]byte
	done     chan struct{}

	mu   sync.Mutex
	bad  []string // the malformed requests seen, for Report
	asks int
}

// listen binds host:port (port 0: a free one). libzmq cannot bind the name
// "localhost", which is vLLM's default host, so a name is resolved first.
func listen(host string, port int, payloads map[[2]int][]byte) (*listener, error) {
	ip := host
	if net.ParseIP(host) == nil {
		addrs, err := net.LookupIP(host)
		if err != nil || len(addrs) == 0 {
			return nil, fmt.Errorf("vllmpeer: side channel host %q does not resolve: %v", host, err)
		}
		ip = addrs[0].String()
	}
	s := &listener{host: ip, payloads: payloads, done: make(chan struct{})}
	s.sock = zmq4.NewRouter(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	if err := s.sock.Listen("tcp://" + net.JoinHostPort(ip, strconv.Itoa(port))); err != nil {
		s.sock.Close()
		return nil, fmt.Errorf("vllmpeer: side channel listen on %s:%d: %w", ip, port, err)
	}
	s.port = s.sock.Addr().(*net.TCPAddr).Port
	go s.serve()
	return s, nil
}

func (s *listener) serve() {
	defer close(s.done)
	for {
		msg, err := s.sock.Recv()
		if err != nil {
			return // zmq4 reports errors here once the socket is closing
		}
		// A REQ client's message reaches a ROUTER as [identity, "", request].
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 {
			s.note(fmt.Sprintf("a message of %d frames, want [identity, empty, request]", len(msg.Frames)))
			continue
		}
		pp, tp, err := parseGetMeta(msg.Frames[2])
		if err != nil {
			s.note(err.Error())
			continue
		}
		payload, ok := s.payloads[[2]int{pp, tp}]
		if !ok {
			s.note(fmt.Sprintf("GET_META_MSG for pp %d tp %d, which this engine does not have", pp, tp))
			continue
		}
		s.mu.Lock()
		s.asks++
		s.mu.Unlock()
		ts, err := msgpack.Marshal(monotonic())
		if err != nil {
			continue
		}
		_ = s.sock.SendMulti(zmq4.NewMsgFrom(msg.Frames[0], nil, payload, ts))
	}
}

func (s *listener) note(what string) {
	s.mu.Lock()
	s.bad = append(s.bad, what)
	s.mu.Unlock()
}

func (s *listener) close() {
	s.sock.Close()
	<-s.done
}

// ErrHashMismatch is the error of a handshake with an engine whose
// compatibility hash is not this peer's; the message names both, as vLLM's
// does.
var ErrHashMismatch = errors.New("NIXL compatibility hash mismatch")

// fetch asks host:port for the payloads of (pp 0, tp rank) for each rank in
// tpRanks over one REQ socket, one after another, as vLLM's handshake
// initiator does; it decodes each in two steps (the hash first) and checks
// the engine id. It returns the metadata and the clock offset of the
// lowest round trip: remote clock - local clock, in seconds.
func fetch(ctx context.Context, host string, port int, tpRanks []int, localHash, engineID string, timeout time.Duration) ([]agentMetadata, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sock := zmq4.NewReq(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer sock.Close()
	if err := sock.Dial("tcp://" + net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
		return nil, 0, fmt.Errorf("vllmpeer: side channel %s:%d: %w", host, port, err)
	}
	out := make([]agentMetadata, 0, len(tpRanks))
	bestRTT, offset := -1.0, 0.0
	for _, r := range tpRanks {
		req, err := getMetaRequest(0, r)
		if err != nil {
			return nil, 0, err
		}
		t0 := monotonic()
		if err := sock.Send(zmq4.NewMsg(req)); err != nil {
			return nil, 0, fmt.Errorf("vllmpeer: GET_META_MSG for tp %d to %s:%d: %w", r, host, port, err)
		}
		type got struct {
			msg zmq4.Msg
			err error
		}
		ch := make(chan got, 1)
		go func() { m, err := sock.Recv(); ch <- got{m, err} }()
		var g got
		select {
		case g = <-ch:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("vllmpeer: no answer from %s:%d for tp %d within %v", host, port, r, timeout)
		}
		t1 := monotonic()
		if g.err != nil {
			return nil, 0, fmt.Errorf("vllmpeer: answer from %s:%d for tp %d: %w", host, port, r, g.err)
		}
		if len(g.msg.Frames) != 2 {
			return nil, 0, fmt.Errorf("vllmpeer: answer from %s:%d for tp %d has %d frames, want 2 (payload, timestamp)", host, port, r, len(g.msg.Frames))
		}
		md, err := decodeHandshake(g.msg.Frames[0], r, localHash, engineID)
		if err != nil {
			return nil, 0, err
		}
		ts, err := parseTimestamp(g.msg.Frames[1])
		if err != nil {
			return nil, 0, err
		}
		if rtt := t1 - t0; bestRTT < 0 || rtt < bestRTT {
			bestRTT, offset = rtt, ts-(t0+t1)/2
		}
		out = append(out, md)
	}
	return out, offset, nil
}

// decodeHandshake decodes a NixlHandshakePayload in vLLM's two phases: the
// payload, whose hash must be localHash, and only then the inner
// NixlAgentMetadata, whose engine id must be the one asked for.
func decodeHandshake(frame []byte, tpRank int, localHash, engineID string) (agentMetadata, error) {
	var p handshakePayload
	if err := msgpack.Unmarshal(frame, &p); err != nil {
		return agentMetadata{}, fmt.Errorf("vllmpeer: failed to decode NixlHandshakePayload from tp %d: %w", tpRank, err)
	}
	if p.CompatibilityHash != localHash {
		return agentMetadata{}, fmt.Errorf("%w. Local: %s, Remote: %s", ErrHashMismatch, localHash, p.CompatibilityHash)
	}
	var md agentMetadata
	if err := msgpack.Unmarshal(p.AgentMetadataBytes, &md); err != nil {
		return agentMetadata{}, fmt.Errorf("vllmpeer: failed to decode NixlAgentMetadata from tp %d: %w", tpRank, err)
	}
	if md.EngineID != engineID {
		return agentMetadata{}, fmt.Errorf("vllmpeer: remote engine id mismatch: expected %q, got %q", engineID, md.EngineID)
	}
	return md, nil
}
