package server

import (
	"time"

	"github.com/gonixl/gonixl/descriptors"

	"github.com/gonixl/gonixl/promstats"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// The engine drives either connector through these two small adapters, one
// value per TP rank.

type producer interface {
	finish(id string, blocks []int, tid string, ntok int) (any, error)
	abort(id string) error
	drainFreed() []string
	held() int
	// drop releases, for an engine shutting down, the holds no decode
	// engine reads (pullconn.Producer.DropHolds) and says how many it
	// dropped and how many stay.
	drop(why string, unclaimedFor time.Duration) (dropped, kept int, err error)
	close() error
	source() promstats.Source
}

type connResult struct {
	id  string
	err error
}

type consumer interface {
	start(r *request) error
	keepAlive(r *request) error
	abort(id string) error
	drain() []connResult
	pending() int
	close() error
	source() promstats.Source
}

// The adapters keep their rank's layout: a grouped model's lists come
// out of the request's blocks by it (groupLists).

type pullProducer struct {
	p   *pullconn.Producer
	lay *descriptors.Layout
}

func (p pullProducer) finish(id string, blocks []int, _ string, ntok int) (any, error) {
	if len(p.lay.Groups) > 0 {
		return p.p.RequestFinishedGroups(id, ntok, groupLists(p.lay, blocks, ntok))
	}
	params, err := p.p.RequestFinished(id, blocks)
	params.NumTokens = ntok
	return params, err
}
func (p pullProducer) abort(id string) error { return p.p.Abort(id) }
func (p pullProducer) drainFreed() []string  { return p.p.DrainFreed() }
func (p pullProducer) held() int             { return p.p.Held() }
func (p pullProducer) drop(why string, unclaimedFor time.Duration) (int, int, error) {
	return p.p.DropHolds(why, unclaimedFor)
}
func (p pullProducer) close() error             { return p.p.Close() }
func (p pullProducer) source() promstats.Source { return p.p }

type pushProducer struct {
	p   *pushconn.Producer
	lay *descriptors.Layout
}

func (p pushProducer) finish(id string, blocks []int, tid string, ntok int) (any, error) {
	opts := []pushconn.RequestOption{pushconn.WithTokens(ntok)}
	if tid != "" {
		opts = append(opts, pushconn.WithTransferID(tid))
	}
	if len(p.lay.Groups) > 0 {
		return p.p.RequestFinishedGroups(id, ntok, groupLists(p.lay, blocks, ntok), opts[1:]...)
	}
	return p.p.RequestFinished(id, blocks, opts...)
}
func (p pushProducer) abort(id string) error { return p.p.Abort(id) }
func (p pushProducer) drainFreed() []string  { return p.p.DrainFreed() }
func (p pushProducer) held() int             { return p.p.Held() }

// drop drops nothing in push: a push hold waits for its decode engine's
// registration, which may still come, and Close tells every decode engine
// that registered (a PUSH failure "prefill rank closed").
func (p pushProducer) drop(string, time.Duration) (int, int, error) { return 0, p.p.Held(), nil }
func (p pushProducer) close() error                                 { return p.p.Close() }
func (p pushProducer) source() promstats.Source                     { return p.p }

type pullConsumer struct {
	c   *pullconn.Consumer
	lay *descriptors.Layout
}

func (c pullConsumer) start(r *request) error {
	if len(c.lay.Groups) > 0 {
		return c.c.LoadGroups(r.engID, r.pull, groupLists(c.lay, r.blocks[:r.promptBlocks], len(r.tokens)))
	}
	return c.c.Load(r.engID, r.pull, r.blocks[:r.promptBlocks])
}
func (c pullConsumer) keepAlive(r *request) error { return c.c.KeepAlive(r.engID, r.pull) }
func (c pullConsumer) abort(id string) error      { return c.c.Abort(id) }
func (c pullConsumer) drain() []connResult {
	rs := c.c.Drain()
	out := make([]connResult, len(rs))
	for i, r := range rs {
		out[i] = connResult{r.RequestID, r.Err}
	}
	return out
}
func (c pullConsumer) pending() int             { return c.c.Pending() }
func (c pullConsumer) close() error             { return c.c.Close() }
func (c pullConsumer) source() promstats.Source { return c.c }

type pushConsumer struct {
	c   *pushconn.Consumer
	lay *descriptors.Layout
}

func (c pushConsumer) start(r *request) error {
	var opts []pushconn.RequestOption
	if r.tid != "" {
		opts = append(opts, pushconn.WithTransferID(r.tid))
	}
	if len(c.lay.Groups) > 0 {
		return c.c.RegisterGroups(r.engID, r.push, groupLists(c.lay, r.blocks[:r.promptBlocks], len(r.tokens)), opts...)
	}
	return c.c.Register(r.engID, r.push, r.blocks[:r.promptBlocks], opts...)
}
func (c pushConsumer) keepAlive(*request) error { return nil }
func (c pushConsumer) abort(id string) error    { return c.c.Abort(id) }
func (c pushConsumer) drain() []connResult {
	rs := c.c.Drain()
	out := make([]connResult, len(rs))
	for i, r := range rs {
		out[i] = connResult{r.RequestID, r.Err}
	}
	return out
}
func (c pushConsumer) pending() int             { return c.c.Pending() }
func (c pushConsumer) close() error             { return c.c.Close() }
func (c pushConsumer) source() promstats.Source { return c.c }
