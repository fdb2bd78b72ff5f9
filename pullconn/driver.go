package pullconn

import (
	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/tracing"
)

// The pull connector registers itself as connector's "pull" driver: an
// engine that imports this package runs it by EngineConfig.Connector and
// codes against connector.Producer and connector.Consumer only.
func init() {
	// It cannot fail: the name is this package's, and init runs once.
	_ = connector.Register("pull", driver{})
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
	return Config{}, invalidf("the rank's configuration is a %T: a pull rank takes a connector.RankConfig or a pullconn.Config", o)
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
		params, err = p.RequestFinishedGroups(r.ID, r.Tokens, r.Blocks)
	} else {
		blocks, berr := oneList(r)
		if berr != nil {
			return connector.Params{}, berr
		}
		params, err = p.Producer.RequestFinished(r.ID, blocks)
		params.NumTokens = r.Tokens
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

func (c consumer) spans() *tracing.Book { return c.rd.spans }

// consumer is a Consumer as a connector.Consumer.
type consumer struct{ *Consumer }

func (c consumer) Load(r connector.Request) error {
	return c.spans().Open(r.Context, r.ID, tracing.KVWait, func() error { return c.load(r) })
}

func (c consumer) load(r connector.Request) error {
	if err := c.e.core.CheckOpen(); err != nil {
		return err
	}
	params, err := paramsOf(r)
	if err != nil {
		return err
	}
	if len(c.cfg.Layout.Groups) > 0 {
		return c.LoadGroups(r.ID, params, r.Blocks)
	}
	blocks, err := oneList(r)
	if err != nil {
		return err
	}
	return c.Consumer.Load(r.ID, params, blocks)
}

func (c consumer) KeepAlive(r connector.Request) error {
	if err := c.e.core.CheckOpen(); err != nil {
		return err
	}
	params, err := paramsOf(r)
	if err != nil {
		return err
	}
	return c.Consumer.KeepAlive(r.ID, params)
}

// paramsOf reads the decode leg's kv_transfer_params as pull's.
func paramsOf(r connector.Request) (Params, error) {
	var p Params
	if err := convert(r.Params, &p); err != nil {
		return Params{}, invalidf("request %q: kv_transfer_params: %v", r.ID, err)
	}
	return p, nil
}

// oneList returns the one block list of a request for a layout without
// KV-cache groups.
func oneList(r connector.Request) ([]int, error) {
	if len(r.Blocks) != 1 {
		return nil, invalidf("request %q has %d block lists, and the layout has one KV-cache group", r.ID, len(r.Blocks))
	}
	return r.Blocks[0], nil
}

// convert copies kv_transfer_params from one view (Params,
// connector.Params) to the other, as their JSON would (groupids.Convert:
// the block lists copied directly).
func convert[F, T any](from F, to *T) error { return groupids.Convert(from, to) }
