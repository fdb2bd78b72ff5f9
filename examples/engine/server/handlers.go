package server

import (
	"net/http"
	"sync"
)

// handlerGate counts the HTTP handlers running so that Shutdown can wait
// for them, and turns away those that start once it waits. A WaitGroup
// cannot: net/http may still hand a connection's request to the handler
// after Server.Close, and a WaitGroup's Add from zero concurrent with its
// Wait is a misuse (the race detector reported it in the soak, an engine
// killed while requests arrived).
type handlerGate struct {
	mu      sync.Mutex
	running int
	closed  bool
	idle    *sync.Cond
}

// enter admits a handler; false once the gate closed.
func (g *handlerGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.running++
	return true
}

// leave ends a handler enter admitted.
func (g *handlerGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.running == 0 && g.idle != nil {
		g.idle.Broadcast()
	}
}

// closeAndWait admits no more handlers and waits for those running. The
// handlers it waits for end on their own: their contexts were cancelled
// before (Shutdown).
func (g *handlerGate) closeAndWait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
	for g.running > 0 {
		g.idle.Wait()
	}
}

// gated runs h under the gate, answering 503 once the engine closes.
func (g *handlerGate) gated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.enter() {
			writeError(w, &apiError{http.StatusServiceUnavailable, "server_error", "The engine is closing; send the request to another engine.", ""})
			return
		}
		defer g.leave()
		h.ServeHTTP(w, r)
	})
}
