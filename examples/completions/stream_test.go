package completions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sse serves one streamed completion: chunks of text, then usage, then
// [DONE] unless cut.
func sse(t *testing.T, texts []string, usage int, done bool, check func(r *http.Request, body Body)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body Body
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		if check != nil {
			check(r, body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tx := range texts {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":%q}]}\n\n", tx)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
		if usage >= 0 {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":%d}}\n\n", usage)
		}
		if done {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCompleteTimesTheStream(t *testing.T) {
	srv := sse(t, []string{" a", "", " b", " c"}, 3, true, func(r *http.Request, b Body) {
		assert.Equal(t, "/v1/completions", r.URL.Path)
		assert.Equal(t, "req-1", r.Header.Get("X-Request-Id"))
		assert.Equal(t, Body{Model: "m", Prompt: "hello world", MaxTokens: 3, IgnoreEOS: true, Stream: true,
			StreamOptions: map[string]any{"include_usage": true}}, b)
	})
	s := Stream(context.Background(), srv.Client(), srv.URL+"/", "m", "req-1", "hello world", 2, 3)
	require.NoError(t, s.Err)
	assert.Equal(t, " a b c", s.Text)
	assert.Equal(t, 3, s.OutputTokens)
	assert.Len(t, s.ITL, 2, "an empty chunk is no token")
	assert.Equal(t, 2, s.PromptTokens)
	var gaps time.Duration
	for _, d := range s.ITL {
		gaps += d
	}
	assert.Equal(t, s.Latency, s.TTFT+gaps, "the latency ends at the last token")
}

func TestCompleteCountsChunksWithoutUsage(t *testing.T) {
	srv := sse(t, []string{"x", "y"}, -1, true, nil)
	s := Stream(context.Background(), srv.Client(), srv.URL, "m", "", "p", 1, 2)
	require.NoError(t, s.Err)
	assert.Equal(t, 2, s.OutputTokens)
}

func TestCompleteErrors(t *testing.T) {
	cut := sse(t, []string{"x"}, 1, false, nil)
	s := Stream(context.Background(), cut.Client(), cut.URL, "m", "", "p", 1, 1)
	assert.EqualError(t, s.Err, "stream ended without data: [DONE]")

	negative := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":-2}}\n\ndata: [DONE]\n\n")
	}))
	defer negative.Close()
	s = Stream(context.Background(), negative.Client(), negative.URL, "m", "", "p", 1, 1)
	assert.ErrorContains(t, s.Err, "completion_tokens is negative")

	none := sse(t, nil, 0, true, nil)
	s = Stream(context.Background(), none.Client(), none.URL, "m", "", "p", 1, 1)
	assert.EqualError(t, s.Err, "no token streamed")

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {nope\n\n")
	}))
	defer bad.Close()
	s = Stream(context.Background(), bad.Client(), bad.URL, "m", "", "p", 1, 1)
	assert.ErrorContains(t, s.Err, `chunk "{nope" is not JSON`)

	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"message":"engine overloaded"}}`)
	}))
	defer refused.Close()
	s = Stream(context.Background(), refused.Client(), refused.URL, "m", "", "p", 1, 1)
	assert.EqualError(t, s.Err, "HTTP 503: engine overloaded")
}

// A request's deadline ends a stream that stalls.
func TestCompleteDeadline(t *testing.T) {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer stall.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	s := Stream(ctx, stall.Client(), stall.URL, "m", "", "p", 1, 1)
	assert.ErrorIs(t, s.Err, context.DeadlineExceeded)
}

// The client reads an endpoint's bytes: whatever they are, it ends with a
// Sample (an error or a count of the text chunks it saw), never a panic.
func FuzzStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"completion_tokens\":-3}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {nope\n\n"))
	f.Add([]byte(": comment\nevent: x\ndata: \n\n"))
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		body = b
		s := Stream(context.Background(), srv.Client(), srv.URL, "m", "", "p", 1, 1)
		if s.Err == nil {
			assert.NotEmpty(t, s.Text, "a stream without text is an error")
			assert.GreaterOrEqual(t, s.Latency, s.TTFT)
			assert.GreaterOrEqual(t, s.OutputTokens, 0)
		}
	})
}
