package connector_test

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	_ "github.com/gonixl/gonixl/pullconn" // registers "pull"
	_ "github.com/gonixl/gonixl/pushconn" // registers "push"
)

// The same engine code serves with either connector: one configuration
// value, EngineConfig.Connector, picks pull or push (docs/engine.md walks
// through it). A prefill and a decode engine of two TP ranks each, on
// loopback agents: decode has blocks for one request at a time, so the
// second waits (kept alive) and the third is aborted while it waits.
func Example_engine() {
	for _, name := range []string{"pull", "push"} {
		if err := serve(name); err != nil {
			fmt.Printf("%s: %v\n", name, err)
		}
	}
	// Output:
	// pull: r1 loaded on 2 ranks, 49152 bytes intact
	// pull: r2 loaded on 2 ranks, 49152 bytes intact
	// pull: prefill freed [r1 r2] while serving, [r3] at close
	// push: r1 loaded on 2 ranks, 49152 bytes intact
	// push: r2 loaded on 2 ranks, 49152 bytes intact
	// push: prefill freed [r1 r2] while serving, [r3] at close
}

// serve runs three requests through a prefill and a decode engine of
// connector name, as a proxy would: prefill first, then decode with
// prefill's kv_transfer_params.
func serve(name string) error {
	fab, err := loopback.NewFabric()
	if err != nil {
		return err
	}
	defer fab.Close()
	pre, err := newEngine(fab, name, "prefill", true, 8)
	if err != nil {
		return err
	}
	defer pre.close()
	dec, err := newEngine(fab, name, "decode", false, 4)
	if err != nil {
		return err
	}
	defer dec.close()

	for _, r := range []struct {
		id     string
		tokens int
	}{{"r1", 40}, {"r2", 40}, {"r3", 20}} {
		params, err := pre.prefill(r.id, r.tokens) // the prefill leg's answer
		if err != nil {
			return err
		}
		dec.submit(&request{id: r.id, tokens: r.tokens, params: params}) // the decode leg
	}
	ended := dec.step() // r1 takes 3 of decode's 4 blocks; r2 and r3 wait (r1 may end at once)
	dec.abort("r3")

	var freed []string
	loaded := 0
	for deadline := time.Now().Add(10 * time.Second); loaded < 2 || len(freed) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("no end within 10 s")
		}
		ended = append(ended, dec.step()...)
		for _, r := range ended {
			if r.err != nil {
				return fmt.Errorf("%s failed: %w", r.id, r.err)
			}
			fmt.Printf("%s: %s loaded on %d ranks, %d bytes intact\n", name, r.id, len(dec.ranks), r.verified)
			loaded++
		}
		ended = ended[:0]
		freed = append(freed, pre.freed()...)
	}
	// Nobody told prefill that r3's decode gave up (a proxy would abort
	// the prefill leg): its hold ends at close.
	for _, p := range pre.ranks {
		p.prod.Close()
	}
	fmt.Printf("%s: prefill freed %v while serving, %v at close\n", name, freed, pre.freed())
	return nil
}

// engine is a serving engine reduced to what touches the connector: the
// connector's Engine, a rank per TP rank, a block allocator and, on
// decode, a scheduler.
type engine struct {
	conn    *connector.Engine
	ranks   []*worker
	free    []int               // block allocator: the free block ids
	queue   []*request          // decode: waiting for blocks
	loading map[string]*request // decode: KV on its way
	held    map[string]*held    // prefill: blocks the connector holds
}

// worker is one TP rank: its agent, its KV cache, and its Producer
// (prefill) or Consumer (decode).
type worker struct {
	agent nixl.Agent
	mem   *nixl.Buffer
	lay   descriptors.Layout
	prod  connector.Producer
	cons  connector.Consumer
}

type request struct {
	id        string
	tokens    int
	params    connector.Params
	blocks    []int
	keptAlive bool
	left      int   // ranks whose Result is still to come
	err       error // the first failed rank's
	verified  int   // bytes checked on arrival
}

type held struct {
	blocks []int
	left   int // ranks that still hold them
}

func newEngine(fab *loopback.Fabric, name, id string, prefill bool, blocks int) (_ *engine, err error) {
	geom := descriptors.Geometry{Layers: 2, KVHeads: 4, HeadDim: 32, DType: "bfloat16", BlockSize: 16, Blocks: blocks, TPSize: 2}
	conn, err := connector.NewEngine(connector.EngineConfig{Connector: name, EngineID: id, Model: "toy", Geometry: geom})
	if err != nil {
		return nil, err
	}
	e := &engine{conn: conn, loading: map[string]*request{}, held: map[string]*held{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	for b := range blocks {
		e.free = append(e.free, b)
	}
	for tp := range geom.TPSize {
		r := &worker{}
		e.ranks = append(e.ranks, r)
		if r.agent, err = fab.NewAgent(fmt.Sprintf("%s-%d", id, tp)); err != nil {
			return nil, err
		}
		if r.mem, err = nixl.AllocBuffer(int(geom.RankBytes())); err != nil {
			return nil, err
		}
		if r.lay, err = geom.Layout(nixl.DRAM, tp, r.mem.RegDesc().Desc); err != nil {
			return nil, err
		}
		cfg := connector.RankConfig{Agent: r.agent, Layout: r.lay}
		if prefill {
			r.prod, err = conn.NewProducer(cfg)
		} else {
			r.cons, err = conn.NewConsumer(cfg)
		}
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

// alloc takes the blocks of a request of tokens tokens, or nil when too
// few are free.
func (e *engine) alloc(tokens int) []int {
	n := (tokens + e.ranks[0].lay.BlockSize - 1) / e.ranks[0].lay.BlockSize
	if n > len(e.free) {
		return nil
	}
	b := e.free[:n:n]
	e.free = e.free[n:]
	return b
}

// prefill computes a request into fresh blocks and hands them to every
// rank's connector; the answer carries rank 0's Params, which every rank
// returns alike.
func (e *engine) prefill(id string, tokens int) (connector.Params, error) {
	blocks := e.alloc(tokens)
	if blocks == nil {
		return connector.Params{}, fmt.Errorf("%s: no blocks", id)
	}
	h := &held{blocks: blocks}
	var params connector.Params
	var failed error
	for tp, r := range e.ranks {
		kv(r, blocks, id, tp, func(b *byte, v byte) { *b = v }) // the model's forward pass
		p, err := r.prod.RequestFinished(connector.Request{ID: id, Blocks: [][]int{blocks}, Tokens: tokens})
		if err != nil {
			failed = err
			continue
		}
		h.left++
		params = p
	}
	if failed != nil { // the ranks that took it let it go
		for _, r := range e.ranks {
			r.prod.Abort(id)
		}
	}
	if h.left == 0 {
		e.free = append(e.free, blocks...)
	} else {
		e.held[id] = h
	}
	return params, failed
}

// submit queues a decode request.
func (e *engine) submit(r *request) { e.queue = append(e.queue, r) }

// abort ends a request whose client went away.
func (e *engine) abort(id string) {
	e.queue = slices.DeleteFunc(e.queue, func(r *request) bool { return r.id == id })
	// Every rank ends what it has of it: the keep-alive of a waiting
	// request, the transfer of a loading one (whose Results still come,
	// and free its blocks).
	for _, r := range e.ranks {
		if r.cons != nil {
			r.cons.Abort(id)
		} else {
			r.prod.Abort(id)
		}
	}
}

// step is one pass of decode's engine loop: admit the waiting requests
// that fit and start their transfer on every rank, keep the others alive,
// and collect the ranks' results; it returns the requests that ended. A
// request ends when every rank's Result is in, failed if any rank failed.
func (e *engine) step() []*request {
	for len(e.queue) > 0 {
		r := e.queue[0]
		if r.blocks = e.alloc(r.tokens); r.blocks == nil {
			break
		}
		e.queue = e.queue[1:]
		e.loading[r.id] = r
		for _, rk := range e.ranks {
			err := rk.cons.Load(connector.Request{ID: r.id, Blocks: [][]int{r.blocks}, Tokens: r.tokens, Params: r.params})
			if err != nil && r.err == nil {
				r.err = err // the ranks that took it give it back (below)
			}
			if err == nil {
				r.left++
			}
		}
		if r.err != nil {
			e.abort(r.id)
		}
	}
	for _, r := range e.queue { // waiting for blocks: hold prefill's KV
		if !r.keptAlive {
			r.keptAlive = true
			for _, rk := range e.ranks {
				rk.cons.KeepAlive(connector.Request{ID: r.id, Tokens: r.tokens, Params: r.params})
			}
		}
	}
	var ended []*request
	for tp, rk := range e.ranks {
		for _, res := range rk.cons.Drain() {
			r := e.loading[res.RequestID]
			if r == nil {
				continue // a request aborted while it waited
			}
			if res.Err != nil && r.err == nil {
				r.err = res.Err
				e.abort(r.id) // the other ranks need not finish
			}
			if res.Err == nil {
				r.verified += kv(rk, r.blocks, r.id, tp, func(b *byte, v byte) {
					if *b != v && r.err == nil {
						r.err = fmt.Errorf("rank %d: wrong byte", tp)
					}
				})
			}
			if r.left--; r.left > 0 {
				continue
			}
			delete(e.loading, r.id)
			// Decoding would run here; this engine is done with the
			// request at once, and its blocks go back.
			e.free = append(e.free, r.blocks...)
			ended = append(ended, r)
		}
	}
	return ended
}

// freed is one pass of prefill's engine loop: it frees the blocks that
// every rank's connector let go of and returns their requests.
func (e *engine) freed() []string {
	var ids []string
	for _, r := range e.ranks {
		for _, id := range r.prod.DrainFreed() {
			if h := e.held[id]; h != nil {
				if h.left--; h.left == 0 {
					e.free = append(e.free, h.blocks...)
					delete(e.held, id)
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// close stops the ranks, then the Engine, then frees the agents and memory.
func (e *engine) close() {
	for _, r := range e.ranks {
		if r.prod != nil {
			r.prod.Close()
		}
		if r.cons != nil {
			r.cons.Close()
		}
	}
	e.conn.Close()
	for _, r := range e.ranks {
		if r.agent != nil {
			r.agent.Close()
		}
		if r.mem != nil {
			r.mem.Free()
		}
	}
}

// kv visits every byte of a request's blocks on rank tp with the value the
// model computes there: set writes it (prefill), a check compares it
// (decode). It returns the bytes visited.
func kv(r *worker, blocks []int, id string, tp int, f func(b *byte, v byte)) int {
	mem, n := r.mem.Bytes(), 0
	bl := int(r.lay.BlockLen())
	for g, reg := range r.lay.Regions {
		base := int(reg.Base - r.mem.Addr())
		for i, b := range blocks {
			for off := range bl {
				f(&mem[base+b*bl+off], byte(int(id[1])*31+tp*17+g*13+i*7+off))
				n++
			}
		}
	}
	return n
}
