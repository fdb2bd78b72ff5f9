package server

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// The gate waits for the handlers running and turns away those that come
// after it closed, with the engine's 503.
func TestHandlerGate(t *testing.T) {
	var g handlerGate
	inside, release := make(chan struct{}), make(chan struct{})
	h := g.gated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-release
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	<-inside
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		g.closeAndWait()
	}()
	// A late request is turned away whether or not closeAndWait took the
	// lock yet: enter fails once closed; before that it would be admitted
	// and waited for, so wait until it is closed.
	for {
		g.mu.Lock()
		c := g.closed
		g.mu.Unlock()
		if c {
			break
		}
		runtime.Gosched()
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "The engine is closing")
	select {
	case <-closed:
		t.Fatal("closeAndWait returned while a handler ran")
	default:
	}
	close(release)
	<-done
	<-closed
}
