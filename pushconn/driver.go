package pushconn

import (
	"cmp"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/tracing"
)

// The push connector registers itself as connector's "push" driver: an
// engine that imports this package runs it by EngineConfig.Connector and
// codes against connector.Producer and connector.Consumer only.
func init() {
	// It cannot fail: the name is this package's, and init runs once.
	_ = connector.Register("push", driver{})
}

type driver struct{}

func (driver) NewEngine(cfg connector.EngineConfig) (*connector.Engine, error) { return NewEngine(cfg) }

func (driver) NewProducer(e *connector.Engine, o connector.RankOptions) (connector.Producer, error) {
	cfg, err := configOf(o)
	if err != nil {
		return nil, err
	}
	p, err := NewProducer(e, cfg)
	if err != nil {
		return nil, err
	}
	return producer{p}, nil
}

func (driver) NewConsumer(e *connector.Engine, o connector.RankOptions) (connector.Consumer, error) {
	cfg, err := configOf(o)
	if err != nil {
		return nil, err
	}
	c, err := NewConsumer(e, cfg)
	if err != nil {
		return nil, err
	}
	return consumer{c}, nil
}

// configOf returns a rank's configuration given as a Config or as the
// shared connector.RankConfig alone.
func configOf(o connector.RankOptions) (Config, error) {
	if c, ok := engine.ConfigOf(o, func(rc connector.RankConfig) Config { return Config{RankConfig: rc} }); ok {
		return c, nil
	}
	return Config{}, invalidf("the rank's configuration is a %T: a push rank takes a connector.RankConfig or a pushconn.Config", o)
}

// producer is a Producer as a connector.Producer; the methods of the same
// signature are the Producer's own.
type producer struct{ *Producer }

func (p producer) RequestFinished(r connector.Request) (params connector.Params, err error) {
	err = p.spans.Open(r.Context, r.ID, tracing.Hold, func() error {
		params, err = p.requestFinished(r)
		return err
	})
	return params, err
}

func (p producer) requestFinished(r connector.Request) (connector.Params, error) {
	var params Params
	var err error
	if len(p.cfg.Layout.Groups) > 0 {
		params, err = p.RequestFinishedGroups(r.ID, r.Tokens, r.Blocks, withTransferID(r.TransferID))
	} else {
		if len(r.Blocks) != 1 {
			return connector.Params{}, invalidf("request %q has %d block lists, and the layout has one KV-cache group", r.ID, len(r.Blocks))
		}
		params, err = p.Producer.RequestFinished(r.ID, r.Blocks[0], withTokens(r.Tokens), withTransferID(r.TransferID))
	}
	if err != nil {
		return connector.Params{}, err
	}
	var out connector.Params
	if err := convert(params, &out); err != nil {
		p.Abort(r.ID)
		return connector.Params{}, err
	}
	return out, nil
}

// Progress is Producer.Progress for the request's one block list, per
// layer with r.FinalLayers.
func (p producer) Progress(r connector.Request) error {
	if len(p.cfg.Layout.Groups) > 0 || len(r.Blocks) != 1 {
		return invalidf("request %q: progressive push takes one block list (a layout of one KV-cache group), got %d", r.ID, len(r.Blocks))
	}
	return p.Producer.Progress(r.ID, r.Blocks[0], r.Tokens, withTransferID(r.TransferID), withLayers(r.FinalLayers))
}

var _ connector.ProgressReporter = producer{}

// DropHolds drops nothing: a push hold waits for its decode engine's
// registration, which may still come, and Close tells every decode engine
// that registered (PUSH_FAIL "prefill rank closed").
func (p producer) DropHolds(string, time.Duration) (dropped, kept int, err error) {
	if p.isClosed() {
		return 0, 0, errClosed
	}
	return 0, p.Held(), nil
}

// DrainFreed ends the hold spans of the requests it returns.
func (p producer) DrainFreed() []string {
	ids := p.Producer.DrainFreed()
	p.spans.EndAll(ids)
	return ids
}

// Drain ends the kv_wait spans of the requests it returns.
func (c consumer) Drain() []connector.Result {
	rs := c.Consumer.Drain()
	for _, r := range rs {
		c.spans().End(r.RequestID, r.Err)
	}
	return rs
}

func (c consumer) spans() *tracing.Book { return c.Consumer.spans }

// consumer is a Consumer as a connector.Consumer.
type consumer struct{ *Consumer }

// Load registers the request's blocks with the prefill engine that
// r.Params name; prefill WRITEs them once it finished the request.
func (c consumer) Load(r connector.Request) error {
	return c.spans().Open(r.Context, r.ID, tracing.KVWait, func() error { return c.load(r) })
}

func (c consumer) load(r connector.Request) error {
	if err := c.engine.core.CheckOpen(); err != nil {
		return err
	}
	pf := prefillOf(r.Params)
	opts := []requestOption{withTokens(r.Tokens), withTransferID(cmp.Or(r.TransferID, r.Params.TransferID))}
	if len(c.cfg.Layout.Groups) > 0 {
		return c.RegisterGroups(r.ID, pf, r.Blocks, opts...)
	}
	if len(r.Blocks) != 1 {
		return invalidf("request %q has %d block lists, and the layout has one KV-cache group", r.ID, len(r.Blocks))
	}
	return c.Register(r.ID, pf, r.Blocks[0], opts...)
}

// KeepAlive does nothing in push: decode's registration is its Load, and
// nothing on prefill waits for decode before it.
func (c consumer) KeepAlive(connector.Request) error { return c.engine.core.CheckOpen() }

// prefillOf returns the prefill engine kv_transfer_params name (pp_size 1
// when absent, as vLLM's proxy sends none).
func prefillOf(p connector.Params) Prefill {
	return Prefill{EngineID: p.RemoteEngineID, Host: p.RemoteHost, Port: p.RemotePort, TPSize: p.TPSize, PPSize: max(p.PPSize, 1)}
}

// convert copies kv_transfer_params from one view (Params,
// connector.Params) to the other, as their JSON would (groupids.Convert:
// the block lists copied directly).
func convert[F, T any](from F, to *T) error { return groupids.Convert(from, to) }

func (p producer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
