package pushconn

import "github.com/gonixl/gonixl/pushconn/internal/pushwire"

// consumerEdge is the Consumer as its decode core's edge (decodeEdge): its
// mutex, its agent, its handshake client and goroutines, its staging
// slots.
type consumerEdge Consumer

func (e *consumerEdge) consumer() *Consumer { return (*Consumer)(e) }

func (e *consumerEdge) lock()   { e.mu.Lock() }
func (e *consumerEdge) unlock() { e.mu.Unlock() }

func (e *consumerEdge) notify(to string, msg []byte) error { return e.cfg.Agent.GenNotif(to, msg, nil) }

// handshake fetches prefill engine pf's payload in the background; the
// result reaches the core at the next tick.
func (e *consumerEdge) handshake(key string, pf Prefill) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		payload, err := e.engine.core.Client().Get(e.ctx, pf.EngineID, e.engine.addr(pf.Host, pf.Port), pf.TPSize)
		e.mu.Lock()
		e.shakes = append(e.shakes, shakeResult{key: key, payload: payload, err: err})
		e.mu.Unlock()
		e.poll.Wake()
	}()
}

func (e *consumerEdge) forgetHandshake(pf Prefill) {
	e.engine.core.Client().Forget(pf.EngineID, e.engine.addr(pf.Host, pf.Port))
}

func (e *consumerEdge) loadMD(agent string, md []byte) (string, error) {
	return loadPeerMD(e.cfg.Agent, agent, md)
}

func (e *consumerEdge) unloadMD(agent string) error { return e.cfg.Agent.InvalidateRemoteMD(agent) }

func (e *consumerEdge) closing() bool { return e.ctx.Err() != nil }

func (e *consumerEdge) signal() { e.consumer().signal() }

func (e *consumerEdge) stagingOffer(p *decodePeer, r *decodeReq) *pushwire.Staging {
	return e.consumer().offerStaging(p, r)
}
