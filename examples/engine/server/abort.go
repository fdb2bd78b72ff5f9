package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Aborting generate requests by id, vLLM's POST /inference/v1/abort_requests
// (and its legacy /abort_requests on a --tokens-only server;
// token_in_token_out/api_router.py@0.34.0): {"request_ids": id or [ids]},
// the ids a generate answer carries ("generate-tokens-<id>"), answered 200
// with no body whether or not a request of that id is running, as vLLM's
// engine ignores an id it does not know. An aborted request's blocks go back
// (its hold, load or registration withdrawn, as when its client leaves) and
// its answer ends with finish_reason "abort".

const (
	abortPath       = "/inference/v1/abort_requests"
	legacyAbortPath = "/abort_requests"
)

// generating is the generate requests being served, by the id their
// answers carry.
type generating struct {
	mu   sync.Mutex
	byID map[string]*request
}

// add registers r under id until the returned func is called; a second
// request of the same id takes the id over (the abort reaches the newer).
func (g *generating) add(id string, r *request) (remove func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID == nil {
		g.byID = map[string]*request{}
	}
	g.byID[id] = r
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.byID[id] == r {
			delete(g.byID, id)
		}
	}
}

// abort marks the requests of ids aborted and returns how many it found.
func (g *generating) abort(ids []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, id := range ids {
		if r := g.byID[id]; r != nil {
			r.abortOnce.Do(func() { close(r.abort) })
			n++
		}
	}
	return n
}

// abortRequests serves POST /inference/v1/abort_requests and
// /abort_requests.
func (s *Server) abortRequests(w http.ResponseWriter, hr *http.Request) {
	if !s.cfg.TokensOnly {
		writeErrorBody(w, http.StatusForbidden, "", scaleOutOff(hr.URL.Path))
		return
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, 1<<20))
	if err != nil {
		return
	}
	var req struct {
		RequestIDs json.RawMessage `json:"request_ids"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.st.abortBad.Add(1)
		writeErrorBody(w, http.StatusBadRequest, "", "JSON decode error: "+err.Error())
		return
	}
	var ids []string
	var one string
	switch {
	case json.Unmarshal(req.RequestIDs, &one) == nil && !isNull(req.RequestIDs):
		ids = []string{one}
	case json.Unmarshal(req.RequestIDs, &ids) == nil && !isNull(req.RequestIDs):
	default:
		s.st.abortBad.Add(1)
		writeErrorBody(w, http.StatusBadRequest, "request_ids", "request_ids must be a request id or a list of request ids (the request_id of the generate answers).")
		return
	}
	found := s.gens.abort(ids)
	s.st.abortFound.Add(uint64(found))
	s.st.abortUnknown.Add(uint64(len(ids) - found))
	w.WriteHeader(http.StatusOK)
}

// abortCounter is gonixl_engine_abort_request_ids_total{result}.
func abortCounter(labels prometheus.Labels, result string, n *atomic.Uint64) prometheus.Collector {
	return resultCounter("gonixl_engine_abort_request_ids_total",
		"Request ids sent to abort_requests: aborted (a generate request of that id was running), unknown (none was), bad_request (a body that named no ids, counted once).", labels, result, n)
}

// scaleOutOff is the refusal of a scale-out endpoint by an engine that is
// not tokens-only.
func scaleOutOff(path string) string {
	return "Scale-out endpoints are disabled: POST " + path + " is served only by a tokens-only engine (-tokens-only, server.Config.TokensOnly), as vLLM serves it with --tokens-only or --enable-scale-out."
}

// abortAnswer is an answer that can end with finish_reason "abort".
type abortAnswer interface {
	// aborted is the stream's closing chunk of an aborted request.
	aborted() any
}

func (a *generateAnswer) aborted() any {
	return generateChunk{RequestID: a.id, OutputMode: "tokens",
		Choices: []generateChoice{{FinishReason: "abort", TokenIDs: []int{}}}}
}

// answerAborted ends the answer of request r, aborted by abort_requests
// after toks were generated: a whole answer carries them with
// finish_reason "abort", a stream ends with an event that says so (and
// the usage event when asked for) and [DONE].
func (s *Server) answerAborted(w http.ResponseWriter, r *request, cf *commonFields, a answer, toks []int, streaming bool, flusher http.Flusher) {
	u := &usage{PromptTokens: len(r.tokens), CompletionTokens: len(toks), TotalTokens: len(r.tokens) + len(toks)}
	if !cf.Stream {
		writeJSON(w, a.whole(toks, "abort", nil, u, nil))
		return
	}
	write := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if !streaming {
		flusher = startStream(w)
		if f := a.first(); f != nil {
			write(f)
		}
	}
	if aa, ok := a.(abortAnswer); ok {
		write(aa.aborted())
	}
	if cf.StreamOptions != nil && cf.StreamOptions.IncludeUsage {
		write(a.usage(u))
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flusher.Flush()
}
