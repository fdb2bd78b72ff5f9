package handshake

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/sidechannel"
)

// Engine is the engine-wide part of a payload.
type Engine struct {
	EngineID  string
	Compat    Compat
	TPSize    int
	PPSize    int
	BlockSize int
}

// Server serves one engine's payload on the side channel. Ranks add
// themselves with SetRank as their agents come up; until every rank has,
// clients are told to retry.
type Server struct {
	engine Engine
	hash   string
	sc     *sidechannel.Server[Hello, Reply]

	// OnRefused, when set before clients connect, is called with the reason
	// for every refused hello (for the failed-handshakes counter).
	onRefused func(error)
	now       func() time.Time
	onExtend  func(reader, agent string, ids []string) []int64
	onConfirm func(reader, agent string, refs []HoldRef) []string
	onReady   func(reader, agent string, q ReadyQuery) []int64

	mu    sync.Mutex
	ranks []*Rank
}

// ServerOptions configure Serve.
type ServerOptions struct {
	sidechannel.ServerOptions
	// OnRefused is called for every hello refused as incompatible.
	OnRefused func(error)
	// Now is the engine's clock, stamped on every reply (default
	// time.Now).
	Now func() time.Time
	// OnExtend answers hold queries (Hello.Extend) with Reply.Holds, for
	// the asking engine (Hello.EngineID) and agent; nil refuses them. The
	// ids are checked before it is called.
	OnExtend func(reader, agent string, ids []string) []int64
	// OnConfirm answers confirmations (Hello.Confirm) with Reply.Verdicts;
	// nil refuses them. The holds are checked (ids, counts, rank numbers)
	// before it is called. Payloads say Confirms when it is set.
	OnConfirm func(reader, agent string, refs []HoldRef) []string
	// OnReady answers readiness queries (Hello.Ready) with Reply.Ready,
	// waiting up to the query's WaitMicros; nil refuses them. The query is
	// checked before it is called.
	OnReady func(reader, agent string, q ReadyQuery) []int64
}

// Serve validates engine and starts answering hellos on addr.
func Serve(addr string, engine Engine, opts ServerOptions) (*Server, error) {
	if err := engine.Compat.Validate(); err != nil {
		return nil, err
	}
	switch {
	case engine.EngineID == "":
		return nil, errors.New("engine id is empty")
	case engine.TPSize < 1:
		return nil, fmt.Errorf("engine tp size is %d, want >= 1", engine.TPSize)
	case engine.PPSize < 1:
		return nil, fmt.Errorf("engine pp size is %d, want >= 1", engine.PPSize)
	case engine.BlockSize < 1:
		return nil, fmt.Errorf("engine block size is %d, want >= 1", engine.BlockSize)
	}
	s := &Server{engine: engine, hash: engine.Compat.Hash(), onRefused: opts.OnRefused, now: opts.Now, onExtend: opts.OnExtend, onConfirm: opts.OnConfirm, onReady: opts.OnReady, ranks: make([]*Rank, engine.TPSize*engine.PPSize)}
	sc, err := sidechannel.Listen(addr, s.answer, opts.ServerOptions)
	if err != nil {
		return nil, err
	}
	s.sc = sc
	return s, nil
}

// Addr returns the address the side channel listens on.
func (s *Server) Addr() *net.TCPAddr { return s.sc.Addr() }

// Engine returns the engine-wide facts the server was started with.
func (s *Server) Engine() Engine { return s.engine }

// SetRank publishes one rank's agent and layout. The layout must belong to
// this engine (rank in range, TP size, PP size and block size equal to the
// engine's).
func (s *Server) SetRank(r Rank) error {
	if r.TPRank < 0 || r.TPRank >= s.engine.TPSize {
		return fmt.Errorf("rank %d outside engine tp size %d", r.TPRank, s.engine.TPSize)
	}
	if r.PPRank < 0 || r.PPRank >= s.engine.PPSize || r.Layout.PPRank != r.PPRank || r.Layout.Stages() != s.engine.PPSize {
		return fmt.Errorf("rank %d of stage %d: layout says stage %d of %d, engine pp size is %d", r.TPRank, r.PPRank, r.Layout.PPRank, r.Layout.Stages(), s.engine.PPSize)
	}
	if r.Layout.TPRank != r.TPRank || r.Layout.TPSize != s.engine.TPSize {
		return fmt.Errorf("rank %d layout says rank %d of %d, engine tp size is %d", r.TPRank, r.Layout.TPRank, r.Layout.TPSize, s.engine.TPSize)
	}
	if r.Layout.BlockSize != s.engine.BlockSize {
		return fmt.Errorf("rank %d layout block_size is %d, engine block size is %d", r.TPRank, r.Layout.BlockSize, s.engine.BlockSize)
	}
	if err := r.Layout.Validate(); err != nil {
		return fmt.Errorf("rank %d: %w", r.TPRank, err)
	}
	if r.Agent == "" || len(r.Metadata) == 0 {
		return fmt.Errorf("rank %d needs an agent name and its metadata", r.TPRank)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	world := r.PPRank*s.engine.TPSize + r.TPRank
	if s.ranks[world] != nil {
		return fmt.Errorf("rank %d is already set", world)
	}
	s.ranks[world] = &r
	return nil
}

// ClearRank withdraws a rank by its world rank (PPRank*TPSize + TPRank;
// its agent is closing); clients are told to retry until it is set again.
func (s *Server) ClearRank(world int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if world >= 0 && world < len(s.ranks) {
		s.ranks[world] = nil
	}
}

// Close stops the side channel and waits for its goroutines.
func (s *Server) Close() error { return s.sc.Close() }

func (s *Server) answer(h Hello) Reply {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	r := Reply{Compat: s.engine.Compat, Hash: s.hash, Now: now().UnixNano()}
	if err := Check(s.engine.Compat, h.Compat, h.Hash); err != nil {
		err = fmt.Errorf("engine %q refused engine %q: %w", s.engine.EngineID, h.EngineID, err)
		if s.onRefused != nil {
			s.onRefused(err)
		}
		r.Error = err.Error()
		return r
	}
	if len(h.Extend) > 0 && len(h.Confirm) > 0 {
		r.Error = "a hello is a hold query or a confirmation, not both"
		return r
	}
	if h.Ready != nil {
		if len(h.Extend) > 0 || len(h.Confirm) > 0 {
			r.Error = "a hello is a readiness query or a hold query or a confirmation, not two"
			return r
		}
		return s.ready(h, r)
	}
	if len(h.Extend) > 0 {
		return s.extend(h, r)
	}
	if len(h.Confirm) > 0 {
		return s.confirm(h, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &Payload{
		EngineID: s.engine.EngineID, Compat: s.engine.Compat, Hash: s.hash,
		TPSize: s.engine.TPSize, PPSize: s.engine.PPSize, BlockSize: s.engine.BlockSize,
		Confirms: s.onConfirm != nil,
	}
	for i, rk := range s.ranks {
		if rk == nil {
			r.Error = fmt.Sprintf("engine %q is not ready: rank %d has not started", s.engine.EngineID, i)
			r.Retry = true
			return r
		}
		p.Ranks = append(p.Ranks, *rk)
	}
	r.Payload = p
	return r
}

// extend answers a hold query.
func (s *Server) extend(h Hello, r Reply) Reply {
	switch {
	case s.onExtend == nil:
		r.Error = fmt.Sprintf("engine %q holds no blocks for peers (not a pull prefill engine)", s.engine.EngineID)
		return r
	case len(h.Extend) > MaxExtendIDs:
		r.Error = fmt.Sprintf("hold query lists %d ids, limit %d", len(h.Extend), MaxExtendIDs)
		return r
	}
	for i, id := range h.Extend {
		if id == "" || len(id) > notif.MaxIDLen {
			r.Error = fmt.Sprintf("hold query id %d is %d bytes, want 1..%d", i, len(id), notif.MaxIDLen)
			return r
		}
	}
	r.Holds = s.onExtend(h.EngineID, h.Agent, h.Extend)
	return r
}

// confirm answers a confirmation.
func (s *Server) confirm(h Hello, r Reply) Reply {
	switch {
	case s.onConfirm == nil:
		r.Error = fmt.Sprintf("engine %q confirms no holds (not a pull prefill engine)", s.engine.EngineID)
		return r
	case len(h.Confirm) > MaxConfirmHolds:
		r.Error = fmt.Sprintf("confirmation lists %d holds, limit %d", len(h.Confirm), MaxConfirmHolds)
		return r
	case h.Agent == "" || len(h.Agent) > notif.MaxIDLen:
		r.Error = fmt.Sprintf("confirmation names an agent of %d bytes, want 1..%d", len(h.Agent), notif.MaxIDLen)
		return r
	}
	for i, ref := range h.Confirm {
		if err := s.checkRef(ref); err != nil {
			r.Error = fmt.Sprintf("confirmation hold %d: %v", i, err)
			return r
		}
	}
	r.Verdicts = s.onConfirm(h.EngineID, h.Agent, h.Confirm)
	return r
}

// checkRef checks one hold of a confirmation against the engine's shape.
func (s *Server) checkRef(ref HoldRef) error {
	switch {
	case ref.ID == "" || len(ref.ID) > notif.MaxIDLen:
		return fmt.Errorf("id is %d bytes, want 1..%d", len(ref.ID), notif.MaxIDLen)
	case ref.N < 1 || ref.N > notif.MaxCount:
		return fmt.Errorf("decode world size %d outside [1, %d]", ref.N, notif.MaxCount)
	case ref.PinMicros < 1:
		return fmt.Errorf("pin of %d us, want >= 1", ref.PinMicros)
	case len(ref.Ranks) == 0 || len(ref.Ranks) > s.engine.TPSize:
		return fmt.Errorf("names %d prefill ranks, engine has %d", len(ref.Ranks), s.engine.TPSize)
	}
	seen := make(map[int]bool, len(ref.Ranks))
	for _, rk := range ref.Ranks {
		if rk < 0 || rk >= s.engine.TPSize || seen[rk] {
			return fmt.Errorf("prefill rank %d is out of range 0..%d or named twice", rk, s.engine.TPSize-1)
		}
		seen[rk] = true
	}
	return nil
}
