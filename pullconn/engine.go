package pullconn

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/vllm"
)

// pullEngine is what a pull engine keeps beside the shared engine: the
// hold deadlines its prefill ranks advertise, its Producers for hold
// queries and pins, and the staging slot index.
type pullEngine struct {
	core *engine.Engine

	mu sync.Mutex
	// advertised is, per request id finishing on the engine's prefill
	// ranks, the hold deadline that the first rank to finish it put in its
	// Params; the other ranks advertise the same, so every rank returns the
	// same Params and each rank's own hold (which starts later) covers it.
	advertised map[string]*advert
	producers  map[int]*Producer // by TP rank, for hold queries
	// incarnations are the incarnations the producers published, by TP
	// rank (Params.RemoteIncarnation).
	incarnations map[int]uint64

	slots slotIndex // staging slot indexes of the prefill ranks
}

type advert struct {
	deadline time.Time
	// mono is the deadline on the engine's side-channel clock, vLLM's
	// clock for remote_blocks_expiry_time (the first rank's, like the
	// deadline, so that every rank returns the same Params).
	mono float64
	// nonce tells this hold of the id from any other, in its key, even
	// if a clock stepped back gave a later hold the same deadline.
	nonce uint64
	// incarnation is the engine's incarnation when the first rank
	// finished the request (Params.RemoteIncarnation).
	incarnation uint64
	// took holds the TP ranks that have finished the request with this
	// advert.
	took map[int]bool
}

// advertise returns the deadline to put in the Params of request id, which
// TP rank rank holds until own.
func (e *pullEngine) advertise(id string, rank int, now, own time.Time) (time.Time, uint64) {
	a := e.advert(id, rank, now, own)
	return a.deadline, a.nonce
}

// advert is advertise's whole answer, with the deadline also on the
// engine's side-channel clock for vLLM's protocol (mono). The first rank
// to finish a request fixes its advert; every other rank takes the same,
// however late it comes (a scheduling delay, a step of its clock, past
// the deadline or not), so every rank returns the same Params. A rank that
// finishes an id whose advert it already took finishes a new request of
// the id (a retry): it gets a new advert, deadline and nonce. So does
// every rank once a rank's hold of the id ended (dropAdverts).
func (e *pullEngine) advert(id string, rank int, now, own time.Time) advert {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.advertised == nil {
		e.advertised = map[string]*advert{}
	}
	a, ok := e.advertised[id]
	if !ok || a.took[rank] {
		if len(e.advertised) > maxAdverts {
			// Bounded: adverts some rank never took (its RequestFinished
			// failed or never came) and whose deadline passed go first.
			for k, v := range e.advertised {
				if !now.Before(v.deadline) {
					delete(e.advertised, k)
				}
			}
		}
		// 53 bits: the Params travel as JSON, and a proxy that decodes
		// numbers as float64 (Go's map[string]any, JavaScript) keeps
		// integers exactly only up to 2^53.
		a = &advert{deadline: own, nonce: rand.Uint64()>>11 | 1, mono: vllm.SideClock() + own.Sub(now).Seconds(),
			incarnation: e.incarnationLocked(), took: map[int]bool{}}
		e.advertised[id] = a
	}
	a.took[rank] = true
	if len(a.took) >= e.core.Config().TPSize {
		delete(e.advertised, id)
	}
	return *a
}

// dropAdverts forgets the adverts of ids whose hold ended on a rank: a
// later RequestFinished of one of them is a new request of the id (a
// retry), not a late rank of this one, and must get a deadline and a
// nonce, hence a hold key, of its own. A rank that finishes the old
// request late then advertises a hold the Params do not name, and decode's
// pin is refused: it costs that load, never a byte.
func (e *pullEngine) dropAdverts(ids []string) {
	if len(ids) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		delete(e.advertised, id)
	}
}

// maxAdverts is how many unfinished adverts an engine keeps before it
// drops those whose deadline passed.
const maxAdverts = 1 << 16

// NewEngine validates cfg and starts the side channel of a pull engine,
// the Engine of this package's Producers and Consumers.
func NewEngine(cfg connector.EngineConfig) (*connector.Engine, error) {
	e := &pullEngine{producers: map[int]*Producer{}, incarnations: map[int]uint64{}}
	pub, core, err := engine.StartPublic[*connector.Engine](cfg, engine.Connector{Name: "pullconn", Mode: handshake.ModePull, ErrInvalid: errInvalid, ErrClosed: errClosed, OnExtend: e.extend, OnConfirm: e.confirm, OnReady: e.ready, State: e})
	e.core = core
	return pub, err
}

// engineOf returns the pull state of e, or an error naming what is wrong
// with it.
func engineOf(e *connector.Engine) (*pullEngine, error) {
	return engine.StateOf[*pullEngine](e, "pullconn", errInvalid)
}

// extend answers a decode engine's hold query: it extends, on every
// prefill rank of the engine, the holds of ids (as a heartbeat does) and
// returns for each the earliest deadline over the ranks, in Unix
// nanoseconds, or 0 if some rank does not hold it. It runs on a side-channel
// goroutine.
func (e *pullEngine) extend(reader, agent string, ids []string) []int64 {
	prods := e.ranks()
	out := make([]int64, len(ids))
	if prods == nil {
		return out // a rank missing cannot vouch for its part of the blocks
	}
	for i, p := range prods {
		ds := p.extendHolds(reader, agent, ids)
		for j, d := range ds {
			switch {
			case d.IsZero():
				out[j] = -1
			case out[j] == -1:
			case i == 0 || d.UnixNano() < out[j]:
				out[j] = d.UnixNano()
			}
		}
	}
	for j := range out {
		out[j] = max(out[j], 0)
	}
	return out
}

// ranks returns the engine's Producers by TP rank, or nil unless every
// rank has one.
func (e *pullEngine) ranks() []*Producer {
	e.mu.Lock()
	defer e.mu.Unlock()
	tp := e.core.Config().TPSize
	if len(e.producers) != tp {
		return nil
	}
	prods := make([]*Producer, tp)
	for r, p := range e.producers {
		prods[r] = p
	}
	return prods
}

// confirm answers a decode rank's pins: for each hold, "" when every
// prefill rank it names holds exactly that hold for engine reader and
// pinned it, else the first rank's reason (a rank that pinned keeps its pin
// whatever the others answered: decode is reading). It runs on a
// side-channel goroutine.
func (e *pullEngine) confirm(reader, agent string, refs []handshake.HoldRef) []string {
	prods := e.ranks()
	out := make([]string, len(refs))
	for i, ref := range refs {
		if prods == nil {
			out[i] = fmt.Sprintf("prefill engine %q does not have all its ranks", e.ID())
			continue
		}
		for _, rk := range ref.Ranks {
			if v := prods[rk].pinHold(reader, agent, ref); v != "" && out[i] == "" {
				out[i] = fmt.Sprintf("prefill engine %q rank %d: %s", e.ID(), rk, v)
			}
		}
	}
	return out
}

// addProducer registers a rank for hold queries; a second Producer for a
// rank is refused.
func (e *pullEngine) addProducer(rank int, p *Producer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.producers[rank]; dup {
		return invalidf("engine %q already has a Producer for TP rank %d", e.ID(), rank)
	}
	e.producers[rank] = p
	return nil
}

func (e *pullEngine) removeProducer(rank int, p *Producer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.producers[rank] == p {
		delete(e.producers, rank)
		delete(e.incarnations, rank)
	}
}

// ID returns the engine id.
func (e *pullEngine) ID() string { return e.core.Config().EngineID }
