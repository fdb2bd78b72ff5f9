package critbench

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// outcome is one decode rank's end of one request.
type outcome struct {
	id  string
	err error
}

// cluster is one prefill and one decode engine with a connector per TP
// rank, in the run's mode.
type cluster struct {
	cfg        Config
	fabric     *loopback.Fabric
	agents     []nixl.Agent
	bufs       []*nixl.Buffer
	preLayouts []descriptors.Layout
	decLayouts []descriptors.Layout

	pushPre, pushDec *connector.Engine
	pushProds        []*pushconn.Producer
	pushCons         []*pushconn.Consumer

	pullPre, pullDec *connector.Engine
	pullProds        []*pullconn.Producer
	pullCons         []*pullconn.Consumer
}

// blocksOf returns request i's block ids (the same on both engines).
func (c *cluster) blocksOf(i int) []int {
	b := make([]int, c.cfg.BlocksPerRequest)
	for k := range b {
		b[k] = i*c.cfg.BlocksPerRequest + k
	}
	return b
}

func newCluster(cfg Config) (c *cluster, err error) {
	c = &cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if cfg.NewAgent == nil {
		if c.fabric, err = loopback.NewFabric(loopback.WithModel(cfg.Link)); err != nil {
			return nil, err
		}
	}
	blocks := cfg.Requests * cfg.BlocksPerRequest
	mk := func(name string, tp, rank int) (nixl.Agent, descriptors.Layout, error) {
		var a nixl.Agent
		var err error
		if cfg.NewAgent != nil {
			a, err = cfg.NewAgent(name)
		} else {
			a, err = c.fabric.NewAgent(name)
		}
		if err != nil {
			return nil, descriptors.Layout{}, fmt.Errorf("critbench: agent %s: %w", name, err)
		}
		c.agents = append(c.agents, a)
		buf, err := nixl.AllocBuffer(layoutBytes(tp, cfg.BlockSize, blocks))
		if err != nil {
			return nil, descriptors.Layout{}, err
		}
		c.bufs = append(c.bufs, buf)
		return a, newLayout(buf, tp, rank, cfg.BlockSize, blocks), nil
	}
	engine := func(id string, tp int) connector.EngineConfig {
		return connector.EngineConfig{EngineID: id, Model: "bench-model", Geometry: geometry(tp, cfg.BlockSize, blocks)}
	}
	push := cfg.Mode == Push
	pushPre, pullPre := engine("prefill", cfg.PrefillTP), engine("prefill", cfg.PrefillTP)
	pushDec, pullDec := engine("decode", cfg.DecodeTP), engine("decode", cfg.DecodeTP)
	if push {
		if c.pushPre, err = pushconn.NewEngine(pushPre); err != nil {
			return nil, err
		}
		if c.pushDec, err = pushconn.NewEngine(pushDec); err != nil {
			return nil, err
		}
	} else {
		if c.pullPre, err = pullconn.NewEngine(pullPre); err != nil {
			return nil, err
		}
		if c.pullDec, err = pullconn.NewEngine(pullDec); err != nil {
			return nil, err
		}
	}
	for r := range cfg.PrefillTP {
		a, l, err := mk(fmt.Sprintf("%s-prefill-%d", cfg.Mode, r), cfg.PrefillTP, r)
		if err != nil {
			return nil, err
		}
		c.preLayouts = append(c.preLayouts, l)
		if push {
			p, err := pushconn.NewProducer(c.pushPre, pushconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
			if err != nil {
				return nil, err
			}
			c.pushProds = append(c.pushProds, p)
		} else {
			p, err := pullconn.NewProducer(c.pullPre, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
			if err != nil {
				return nil, err
			}
			c.pullProds = append(c.pullProds, p)
		}
	}
	for r := range cfg.DecodeTP {
		a, l, err := mk(fmt.Sprintf("%s-decode-%d", cfg.Mode, r), cfg.DecodeTP, r)
		if err != nil {
			return nil, err
		}
		c.decLayouts = append(c.decLayouts, l)
		if push {
			cn, err := pushconn.NewConsumer(c.pushDec, pushconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
			if err != nil {
				return nil, err
			}
			c.pushCons = append(c.pushCons, cn)
		} else {
			cn, err := pullconn.NewConsumer(c.pullDec, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}, Inline: cfg.Mode == PullInline})
			if err != nil {
				return nil, err
			}
			c.pullCons = append(c.pullCons, cn)
		}
	}
	return c, nil
}

// arrive is what decode does when a request arrives: push registers its
// blocks on every decode rank; pull waits for prefill's params.
func (c *cluster) arrive(id string, i int) error {
	for _, cn := range c.pushCons {
		if err := cn.Register(id, pushconn.Coordinates(c.pushPre), c.blocksOf(i)); err != nil {
			return err
		}
	}
	return nil
}

// finish is prefill finishing the request on every rank; in pull mode the
// proxy then hands the params to decode at once, which loads them.
func (c *cluster) finish(id string, i int) (load func() error, err error) {
	blocks := c.blocksOf(i)
	for _, p := range c.pushProds {
		if _, err := p.RequestFinished(id, blocks); err != nil {
			return nil, err
		}
	}
	if len(c.pullProds) == 0 {
		return nil, nil
	}
	var params pullconn.Params
	for _, p := range c.pullProds {
		var err error
		if params, err = p.RequestFinished(id, blocks); err != nil {
			return nil, err
		}
	}
	// Decode can start loading only once the params have travelled back
	// through the proxy: the caller runs load after the handoff.
	return func() error {
		for _, cn := range c.pullCons {
			if err := cn.Load(id, params, blocks); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// drainDecode returns the decode ranks' results since the last call.
func (c *cluster) drainDecode() []outcome {
	var out []outcome
	for _, cn := range c.pushCons {
		for _, r := range cn.Drain() {
			out = append(out, outcome{r.RequestID, r.Err})
		}
	}
	for _, cn := range c.pullCons {
		for _, r := range cn.Drain() {
			out = append(out, outcome{r.RequestID, r.Err})
		}
	}
	return out
}

// drainFreed returns how many request-rank holds prefill freed since the
// last call.
func (c *cluster) drainFreed() int {
	n := 0
	for _, p := range c.pushProds {
		n += len(p.DrainFreed())
	}
	for _, p := range c.pullProds {
		n += len(p.DrainFreed())
	}
	return n
}

// bytesMoved sums the bytes the initiators' transfers moved.
func (c *cluster) bytesMoved() uint64 {
	var n uint64
	for _, p := range c.pushProds {
		n += p.Stats().Bytes
	}
	for _, cn := range c.pullCons {
		n += cn.Stats().Bytes
	}
	return n
}

// confirmMean is the mean round trip of pull's confirmations in the run
// (zero for push): what the confirmation adds to pull's critical path.
func (c *cluster) confirmMean() time.Duration {
	var n, us uint64
	for _, cn := range c.pullCons {
		st := cn.Stats()
		a, _ := st.Get("confirmations")
		b, _ := st.Get("confirmation_microseconds")
		n, us = n+a, us+b
	}
	if n == 0 {
		return 0
	}
	return time.Duration(us/n) * time.Microsecond
}

func (c *cluster) close() error {
	var errs []error
	for _, p := range c.pushProds {
		errs = append(errs, p.Close())
	}
	for _, cn := range c.pushCons {
		errs = append(errs, cn.Close())
	}
	for _, p := range c.pullProds {
		errs = append(errs, p.Close())
	}
	for _, cn := range c.pullCons {
		errs = append(errs, cn.Close())
	}
	if c.pushPre != nil {
		errs = append(errs, c.pushPre.Close())
	}
	if c.pushDec != nil {
		errs = append(errs, c.pushDec.Close())
	}
	if c.pullPre != nil {
		errs = append(errs, c.pullPre.Close())
	}
	if c.pullDec != nil {
		errs = append(errs, c.pullDec.Close())
	}
	for _, a := range c.agents {
		errs = append(errs, a.Close())
	}
	for _, b := range c.bufs {
		errs = append(errs, b.Free())
	}
	if c.fabric != nil {
		errs = append(errs, c.fabric.Close())
	}
	return errors.Join(errs...)
}
