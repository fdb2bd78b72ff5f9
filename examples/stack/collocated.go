package stack

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
)

// ModeCollocated is the stack without disaggregation: engines that each
// prefill and decode their own requests (an engine serving /v1/completions
// without kv_transfer_params does both, on one loop, with the same compute
// model as the split's engines), behind a balancer in the proxy's place. No
// KV moves between engines.
const ModeCollocated = "collocated"

// DefaultReplicas is the number of collocated engines when
// Config.Replicas is 0: two, the split's engine count, so that the
// collocated stack gets the split's hardware (two nodes of TPSize GPUs
// each, one engine per node) and the same per-engine compute model.
const DefaultReplicas = 2

// balancer sends each request to the engine with the fewest requests in
// flight, ties to the next in rotation (data-parallel replicas behind one
// endpoint). Responses stream through unbuffered.
type balancer struct {
	proxies  []*httputil.ReverseProxy
	inflight []atomic.Int64
	mu       sync.Mutex
	next     int
}

func newBalancer(urls []string) (*balancer, error) {
	b := &balancer{inflight: make([]atomic.Int64, len(urls))}
	for _, u := range urls {
		target, err := url.Parse(u)
		if err != nil {
			return nil, err
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1 // stream every chunk as the engine writes it
		b.proxies = append(b.proxies, rp)
	}
	return b, nil
}

// pick returns the engine index for the next request.
func (b *balancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	for k := range len(b.proxies) {
		i := (b.next + k) % len(b.proxies)
		if best < 0 || b.inflight[i].Load() < b.inflight[best].Load() {
			best = i
		}
	}
	b.next = (best + 1) % len(b.proxies)
	b.inflight[best].Add(1)
	return best
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthcheck" { // the P/D proxy's health path
		w.WriteHeader(http.StatusOK)
		return
	}
	// Full duplex: an engine may start its answer before the transport has
	// sent (or made its last read of) the request body. Without it net/http's
	// HTTP/1 server closes the unread body when the answer's header goes
	// out (Go issue 40747); the transport then tears the engine connection
	// down and cuts the stream ("use of closed network connection"), or
	// waits on the body's lock when the client is still sending.
	_ = http.NewResponseController(w).EnableFullDuplex() // not every writer supports it; nothing better to do then
	i := b.pick()
	defer b.inflight[i].Add(-1)
	b.proxies[i].ServeHTTP(w, r)
}
