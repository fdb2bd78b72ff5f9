package pd

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A decode engine that dies mid-answer: the client gets a JSON error (not a cut body) or,
// once a stream is under way, an SSE error event and [DONE]; the request counts as failed.
func TestDecodeDiesMidAnswer(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, sseChunks[0]+`data: {"id":"cm`)
			w.(http.Flusher).Flush()
		} else {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "500")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"id":"cmpl-1","choices":[{"te`)
			w.(http.Flusher).Flush()
		}
		panic(http.ErrAbortHandler) // the connection is cut
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	resp := h.post(t, context.Background(), clientBody, nil)
	body := string(readAll(t, resp))
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, "decode answer broke off") {
		t.Fatalf("non-stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if s := h.p.Stats(); s.Failed != 1 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
	h = newHarness(t, Config{}, []*fake{pf}, []*fake{df}) // the first proxy took decode out of rotation
	resp = h.post(t, context.Background(), `{"model":"toy","prompt":"hi","max_tokens":9,"stream":true}`, nil)
	body = string(readAll(t, resp))
	want := sseChunks[0] + `data: {"id":"cm` + "\n\ndata: {\"error\":"
	if resp.StatusCode != 200 || !strings.HasPrefix(body, want) || !strings.Contains(body, "decode stream broke off") ||
		!strings.HasSuffix(body, "\n\ndata: [DONE]\n\n") {
		t.Fatalf("stream: %d %q", resp.StatusCode, body)
	}
	if s := h.p.Stats(); s.Failed != 1 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A decode engine shutting down may end a request with an empty 200, or a stream without
// [DONE]: the client gets an error, not an empty success.
func TestDecodeEndsEarly(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, sseChunks[0])
		}
		// and return: net/http ends the answer cleanly
	})
	for _, tc := range []struct {
		body, want string
	}{
		{clientBody, `"message":"decode engine ` + df.srv.URL + ` answered 200 without a JSON body (0 bytes)"`},
		{`{"model":"toy","prompt":"hi","max_tokens":9,"stream":true}`, sseChunks[0] + "\n\ndata: {\"error\":{\"message\":\"decode stream broke off: decode engine " + df.srv.URL + " ended the stream without [DONE]\",\"type\":\"server_error\",\"param\":null,\"code\":502}}\n\ndata: [DONE]\n\n"},
	} {
		h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
		resp := h.post(t, context.Background(), tc.body, nil)
		body := string(readAll(t, resp))
		if !strings.Contains(body, tc.want) {
			t.Fatalf("got %d %q, want it to contain %q", resp.StatusCode, body, tc.want)
		}
		if s := h.p.Stats(); s.Failed != 1 {
			t.Fatalf("stats %+v", s)
		}
	}
}
