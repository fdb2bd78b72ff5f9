package stack

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The balancer streams an engine's answer that starts before the whole
// request body has gone through. net/http's HTTP/1 server closes a request
// body that is unread when the handler writes its response header (Go
// issue 40747). On a busy machine the engine answered before the balancer's
// transport made its last read of the body: the transport tore the engine
// connection down and cut the stream ("ReverseProxy read error during body
// copy: use of closed network connection"; the bench saw "unexpected EOF").
// Here the client sends the body's first byte, and the rest only once it
// holds the answer's header, which makes the order certain: without full
// duplex the balancer's header write waited on the body's lock for ever.
func TestBalancerStreamsWhileTheEngineStillReads(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<12)
	headerSeen := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		require.NoError(t, rc.EnableFullDuplex())
		first := make([]byte, 1)
		if _, err := io.ReadFull(r.Body, first); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("data: first\n\n"))
		_ = rc.Flush()
		<-headerSeen
		rest, err := io.ReadAll(r.Body)
		if err != nil {
			_, _ = w.Write([]byte("data: engine read error: " + err.Error() + "\n\n"))
			return
		}
		_, _ = w.Write([]byte("data: read " + http.StatusText(http.StatusOK) + " " + strconv.Itoa(len(first)+len(rest)) + "\n\n"))
	}))
	defer engine.Close()
	b, err := newBalancer([]string{engine.URL})
	require.NoError(t, err)
	front := httptest.NewServer(b)
	defer front.Close()

	// The client sends the first byte, and the rest once it holds the
	// answer's header: the body is still arriving when the balancer writes
	// that header.
	pr, pw := io.Pipe()
	// The deadline only turns a hang (the old behaviour here) into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/completions", pr)
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	go func() { _, _ = pw.Write(body[:1]) }()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	go func() {
		_, err := pw.Write(body[1:])
		pw.CloseWithError(err)
	}()
	close(headerSeen)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the stream was cut after %q", got)
	assert.Equal(t, "data: first\n\ndata: read OK "+strconv.Itoa(len(body))+"\n\n", string(got))
}
