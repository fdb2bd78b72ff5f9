package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// connRequests counts the requests one connection carried.
type connRequests struct{}

// A render server that closes a kept-alive connection as the client sends
// on it (it restarted, or its keep-alive timeout ran out just then: the
// client's pool had not yet seen the close) costs no call: every call is a
// pure function of its body, so the client sends it again on a new
// connection. Here the server answers the first request of each connection
// and hangs up on the second, which makes that race happen every time.
func TestClientResendsWhenKeptAliveConnectionCloses(t *testing.T) {
	s, err := New(Config{})
	require.NoError(t, err)
	var served, hungUp atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(connRequests{}).(*atomic.Int32).Add(1) == 2 {
			hungUp.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		served.Add(1)
		s.Handler().ServeHTTP(w, r)
	}))
	ts.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connRequests{}, new(atomic.Int32))
	}
	ts.Start()
	defer ts.Close()

	var req chat.Request
	require.NoError(t, json.Unmarshal([]byte(weatherReq), &req))
	want, err := s.Pipeline().Render(&req)
	require.NoError(t, err)
	c := &Client{BaseURL: ts.URL, HTTP: ts.Client()}
	for i := range 3 {
		gen, err := c.Render(context.Background(), &req)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, want, gen.TokenIDs, "call %d", i)
	}
	// Calls 2 and 3 each went out on a kept-alive connection that closed
	// under them, and again on a new one.
	require.Equal(t, int32(3), served.Load())
	require.Equal(t, int32(2), hungUp.Load())
}
