package pullconn

import (
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
	// adverts are the hold deadlines and nonces the engine's prefill
	// ranks advertise, per request id finishing on them: the first rank to
	// finish a request fixes them, so every rank returns the same Params
	// and each rank's own hold (which starts later) covers them.
	adverts   adverts
	producers map[int]*Producer // by TP rank, for hold queries
	// incarnations are the incarnations the producers published, by TP
	// rank (Params.RemoteIncarnation).
	incarnations map[int]uint64

	slots slotIndex // staging slot indexes of the prefill ranks
}

// advert is adverts.take under the engine's lock: the advert of request
// id for TP rank rank, which holds until own by its clock now. A new one
// gets a random nonce and the engine's incarnation, and the deadline also
// on the engine's side-channel clock for vLLM's protocol (mono).
func (e *pullEngine) advert(id string, rank int, now, own time.Time) advert {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.adverts.take(id, rank, e.core.Config().TPSize, now, own, func(own time.Time) advert {
		// 53 bits: the Params travel as JSON, and a proxy that decodes
		// numbers as float64 (Go's map[string]any, JavaScript) keeps
		// integers exactly only up to 2^53.
		return advert{deadline: own, nonce: rand.Uint64()>>11 | 1, mono: vllm.SideClock() + own.Sub(now).Seconds(),
			incarnation: e.incarnationLocked()}
	})
}

// dropAdverts is adverts.drop under the engine's lock.
func (e *pullEngine) dropAdverts(ids []string) {
	if len(ids) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.adverts.drop(ids)
}

// maxAdverts is how many unfinished adverts an engine keeps before it
// drops those whose deadline passed.
const maxAdverts = 1 << 16

// NewEngine validates cfg and starts the side channel of a pull engine,
// the Engine of this package's Producers and Consumers.
func NewEngine(cfg connector.EngineConfig) (*connector.Engine, error) {
	e := &pullEngine{producers: map[int]*Producer{}, incarnations: map[int]uint64{}, adverts: adverts{limit: maxAdverts}}
	pub, core, err := engine.StartPublic[*connector.Engine](cfg, engine.Connector{Name: "pullconn", Mode: handshake.ModePull, ErrInvalid: errInvalid, ErrClosed: errClosed, OnExtend: e.extend, OnConfirm: e.confirm, OnReady: e.ready, State: e})
	e.core = core
	return pub, err
}

// engineOf returns the pull state of e, or an error naming what is wrong
// with it.
func engineOf(e *connector.Engine) (*pullEngine, error) {
	return engine.StateOf[*pullEngine](e, "pullconn", errInvalid)
}

// extend answers a decode engine's hold query (extendRanks). It runs on a
// side-channel goroutine.
func (e *pullEngine) extend(reader, agent string, ids []string) []int64 {
	return extendRanks(e.ranks(), reader, agent, ids)
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

// confirm answers a decode rank's pins (confirmRanks). It runs on a
// side-channel goroutine.
func (e *pullEngine) confirm(reader, agent string, refs []handshake.HoldRef) []string {
	return confirmRanks(e.ID(), e.ranks(), reader, agent, refs)
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
