package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/promstats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

type promMetrics struct {
	ttft, tpot prometheus.Histogram
}

func (s *Server) initMetrics(engine promstats.Source) error {
	s.reg = prometheus.NewRegistry()
	id := s.cfg.EngineID
	var cs []prometheus.Collector
	srcs := []promstats.Source{engine}
	for _, p := range s.prods {
		srcs = append(srcs, p)
	}
	for _, c := range s.conss {
		srcs = append(srcs, c)
	}
	for i, src := range srcs {
		rank := "engine" // the connector Engine's own counters
		if i > 0 {
			rank = strconv.Itoa(i - 1)
		}
		cs = append(cs, promstats.New(src, promstats.Options{VLLMNames: true,
			ConstLabels: prometheus.Labels{"engine_id": id, "tp_rank": rank}}))
	}
	labels := prometheus.Labels{"engine_id": id, "model_name": s.cfg.ServedModelName}
	s.prom.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds",
		Help: "Histogram of time to first token in seconds.", ConstLabels: labels,
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}})
	s.prom.tpot = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_per_output_token_seconds",
		Help: "Histogram of time per output token in seconds.", ConstLabels: labels,
		Buckets: []float64{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	cs = append(cs, s.prom.ttft, s.prom.tpot,
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 { return float64(s.st.running.Load()) }),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 { return float64(s.st.waiting.Load()) }),
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func() float64 {
			return float64(s.st.blocks.Load()) / float64(s.cfg.NumBlocks)
		}),
		// The simulation's own checks, so that a benchmark of engines in
		// other processes can tell that decode got the right bytes.
		counter("gonixl_engine_kv_bytes_verified_total", "KV bytes decode loaded and found equal to the prompt's.", func() float64 { return float64(s.st.verified.Load()) }),
		counter("gonixl_engine_kv_verify_failures_total", "Requests whose loaded KV differed from the prompt's.", func() float64 { return float64(s.st.verifyFail.Load()) }),
		// How each completion request ended, so that a client (the soak,
		// examples/soak) can match the engine's counts with its own.
		requestsCounter(labels, "done", &s.st.done), requestsCounter(labels, "failed", &s.st.failed), requestsCounter(labels, "aborted", &s.st.aborted),
		// Progress reports to the connector ranks (progress.go), by their answer.
		resultCounter("gonixl_engine_progress_reports_total", "Progress reports to the connector ranks: taken, or refused (the request then moves at its finish).",
			labels, "taken", &s.st.progressTaken),
		resultCounter("gonixl_engine_progress_reports_total", "Progress reports to the connector ranks: taken, or refused (the request then moves at its finish).",
			labels, "refused", &s.st.progressRefused),
		// POST /inference/v1/abort_requests (abort.go), by what each id met.
		abortCounter(labels, "aborted", &s.st.abortFound), abortCounter(labels, "unknown", &s.st.abortUnknown),
		abortCounter(labels, "bad_request", &s.st.abortBad),
		// The engine's goroutines and memory, to tell a leak over hours.
		collectors.NewGoCollector())
	for _, c := range cs {
		if err := s.reg.Register(c); err != nil {
			return fmt.Errorf("engine: metrics: %w", err)
		}
	}
	return nil
}

// resultCounter is counter name{result} over n, with the engine's labels.
func resultCounter(name, help string, labels prometheus.Labels, result string, n *atomic.Uint64) prometheus.Collector {
	l := prometheus.Labels{"result": result}
	maps.Copy(l, labels)
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l},
		func() float64 { return float64(n.Load()) })
}

// requestsCounter is gonixl_engine_requests_total{result}: completion
// requests that ended so (Stats.RequestsDone, RequestsFailed, RequestsAborted).
func requestsCounter(labels prometheus.Labels, result string, n *atomic.Uint64) prometheus.Collector {
	return resultCounter("gonixl_engine_requests_total",
		"Completion requests that ended: done (answered in full), failed (answered with an error), aborted (the client went away first).", labels, result, n)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST "+generatePath, s.generate)
	mux.HandleFunc("POST "+abortPath, s.abortRequests)
	mux.HandleFunc("POST "+legacyAbortPath, s.abortRequests)
	mux.HandleFunc("/", noRoute)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if s.closing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{
			{"id": s.cfg.ServedModelName, "object": "model", "owned_by": "gonixl", "root": s.cfg.Model.Name}}})
	})
	mux.HandleFunc("GET /kv_transfer_info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.info) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return s.handlers.gated(mux)
}

// kvFlags are the kv_transfer_params keys that select the protocol, and push
// decode's prefill coordinates (as the proxy sends them).
type kvFlags struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	TransferMode    string `json:"transfer_mode"`
	TransferID      string `json:"transfer_id"`
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteHost      string `json:"remote_host"`
	RemotePort      int    `json:"remote_port"`
	TPSize          int    `json:"tp_size"`
	PPSize          int    `json:"pp_size"`
}

// routeMethods are the methods of each route, for noRoute's 405.
var routeMethods = map[string]string{
	"/v1/completions":      http.MethodPost,
	"/v1/chat/completions": http.MethodPost,
	generatePath:           http.MethodPost,
	abortPath:              http.MethodPost,
	legacyAbortPath:        http.MethodPost,
	"/health":              http.MethodGet,
	"/v1/models":           http.MethodGet,
	"/kv_transfer_info":    http.MethodGet,
	"/metrics":             http.MethodGet,
}

// noRoute answers what no route took with the JSON error shape, not the mux's
// plain text: 405 with Allow for a known path, else 404.
func noRoute(w http.ResponseWriter, r *http.Request) {
	if m, ok := routeMethods[r.URL.Path]; ok {
		w.Header().Set("Allow", m)
		writeErrorBody(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s %s is not supported; use %s.", r.Method, r.URL.Path, m))
		return
	}
	writeErrorBody(w, http.StatusNotFound, "", fmt.Sprintf("No route %s %s on this engine; it serves POST /v1/completions, POST /v1/chat/completions and GET /v1/models.", r.Method, r.URL.Path))
}

// commonFields are the request fields /v1/completions and /v1/chat/completions
// share.
type commonFields struct {
	Model         string `json:"model"`
	MaxTokens     *int   `json:"max_tokens"`
	N             *int   `json:"n"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS        bool            `json:"ignore_eos"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	// ReturnTokenIDs (vLLM's extension) adds the prompt's token ids to the
	// answer: the proxy hands chat prompts from prefill to decode with them.
	ReturnTokenIDs bool `json:"return_token_ids"`
	// KVHistoryParams and KVHistoryExport are the proxy's bidirectional
	// KV extension (bidir.go): the history a prefill leg reads back, and a
	// decode leg's request to hold its prompt for the next turn.
	KVHistoryParams json.RawMessage `json:"kv_history_params"`
	KVHistoryExport bool            `json:"kv_history_export"`

	// The request fields the prompt and its token limit came from, for
	// errors about them found later: "prompt" and "max_tokens" (the
	// default), or a chat request's "messages" (or "prompt_token_ids") and
	// "max_completion_tokens".
	promptParam, maxTokensParam string
}

// completionRequest is /v1/completions' own field. The shared fields are
// decoded apart, not embedded: encoding/json names an embedded struct's Go
// name in the field path of its errors.
type completionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
}

// decodeRequest decodes body into the shared fields and into v.
func decodeRequest(body []byte, cf *commonFields, v any) *fieldError {
	if e := decodeJSON(body, cf, ""); e != nil {
		return e
	}
	return decodeJSON(body, v, "")
}

const promptHelp = "send a string, a list of token ids, or a list holding one of either"

func parsePrompt(raw json.RawMessage, vocab int) ([]int, *fieldError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "prompt is required; %s.", promptHelp)
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return Tokenize(text), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return ids, checkTokenIDs("prompt", ids, vocab)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) == 1 {
		return Tokenize(texts[0]), nil
	}
	var lists [][]int
	if json.Unmarshal(raw, &lists) == nil && len(lists) == 1 {
		return lists[0], checkTokenIDs("prompt", lists[0], vocab)
	}
	if len(texts) > 1 || len(lists) > 1 {
		return nil, badRequest("prompt", "prompt holds %d prompts; this engine takes one prompt per request: send one request each.", max(len(texts), len(lists)))
	}
	return nil, badRequest("prompt", "prompt must be a string or a list of token ids; %s.", promptHelp)
}

// promptIsText says whether a prompt is text (a string, or a list of
// strings), which a tokens-only engine cannot tokenize.
func promptIsText(raw json.RawMessage) bool {
	var text string
	var texts []string
	return json.Unmarshal(raw, &text) == nil || (json.Unmarshal(raw, &texts) == nil && len(texts) > 0)
}

func checkTokenIDs(param string, ids []int, vocab int) *fieldError {
	for i, t := range ids {
		if t < 0 || t >= vocab {
			return badRequest(param, "%s[%d] is token id %d, outside the vocabulary [0, %d).", param, i, t, vocab)
		}
	}
	return nil
}

// newRequest checks the shared fields and builds the request for the engine
// loop from the prompt's tokens.
func (s *Server) newRequest(cf *commonFields, toks []int, reqID string) (*request, *fieldError) {
	if cf.Model == "" {
		cf.Model = s.cfg.ServedModelName
	}
	if cf.Model != s.cfg.ServedModelName {
		return nil, &fieldError{http.StatusNotFound, "model",
			fmt.Sprintf("The model `%s` does not exist; this engine serves `%s` (GET /v1/models).", cf.Model, s.cfg.ServedModelName)}
	}
	if cf.N != nil && *cf.N != 1 {
		if *cf.N < 1 {
			return nil, badRequest("n", "n must be at least 1, got %d.", *cf.N)
		}
		// The compute model is deterministic: n choices would be n copies.
		return nil, badRequest("n", "n must be 1, got %d: this engine returns one choice per request; send %d requests instead.", *cf.N, *cf.N)
	}
	r := &request{id: reqID, engID: reqID + "-" + randHex(8), tokens: toks, maxTokens: DefaultMaxTokens, gen: generation{ignoreEOS: cf.IgnoreEOS},
		promptParam: cmp.Or(cf.promptParam, "prompt"), maxTokensParam: cmp.Or(cf.maxTokensParam, "max_tokens")}
	if cf.MaxTokens != nil {
		if *cf.MaxTokens < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *cf.MaxTokens)
		}
		r.maxTokens = *cf.MaxTokens
	}
	if e := s.parseKV(cf.KVTransferParams, r); e != nil {
		return nil, e
	}
	if e := s.parseHistory(cf, r); e != nil {
		return nil, e
	}
	r.ph = prefixHashes(toks)
	r.events = make(chan event, r.maxTokens+2)
	return r, nil
}

// parseKV reads kv_transfer_params into r: the leg's kind and its transfer.
func (s *Server) parseKV(raw json.RawMessage, r *request) *fieldError {
	const param = "kv_transfer_params"
	kv := bytes.TrimSpace(raw)
	if len(kv) == 0 || string(kv) == "null" {
		return nil
	}
	var f kvFlags
	if e := decodeJSON(kv, &f, param+"."); e != nil {
		return e
	}
	// A leg without transfer_mode is the engine's own connector's: vLLM's
	// proxies send the prefill leg only {"do_remote_decode": true}, to pull
	// and push engines alike (vLLM writes transfer_mode only into the
	// params a prefill returns).
	mode := f.TransferMode
	if mode == "" {
		mode = s.cfg.Connector
	}
	if (f.DoRemoteDecode || f.DoRemotePrefill) && mode != s.cfg.Connector {
		return badRequest(param+".transfer_mode", "kv_transfer_params.transfer_mode is %q, but this engine's connector is %q; send the request to a %s engine.", mode, s.cfg.Connector, mode)
	}
	switch {
	case f.DoRemoteDecode && f.DoRemotePrefill:
		return badRequest(param, "kv_transfer_params sets both do_remote_decode and do_remote_prefill; set do_remote_decode on the prefill leg and do_remote_prefill on the decode leg.")
	case f.DoRemoteDecode:
		if s.cfg.Role != RolePrefill {
			return badRequest(param+".do_remote_decode", "kv_transfer_params.do_remote_decode was sent to a decode (kv_consumer) engine; send the prefill leg to a prefill engine.")
		}
		r.kind, r.tid = kindPrefill, f.TransferID
		r.maxTokens = 1
	case f.DoRemotePrefill:
		if s.cfg.Role != RoleDecode {
			return badRequest(param+".do_remote_prefill", "kv_transfer_params.do_remote_prefill was sent to a prefill (kv_producer) engine; send the decode leg to a decode engine.")
		}
		r.kind, r.tid = kindDecode, f.TransferID
		// The connector reads the params (Consumer.Load) and refuses what
		// it cannot use; loadError answers its refusal by the key at fault.
		if e := decodeJSON(kv, &r.params, param+"."); e != nil {
			return e
		}
		if missing := pushMissing(&r.params); s.cfg.Connector == ConnPush && missing != "" {
			// Push registers before prefill runs: say what the proxy must
			// send beside do_remote_prefill.
			return badRequest(param+"."+missing, "kv_transfer_params: push decode needs remote_engine_id, remote_host, remote_port and tp_size (the prefill engine's GET /kv_transfer_info), got %s.", kv)
		}
	}
	return nil
}

type choice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completion struct {
	ID               string   `json:"id"`
	Object           string   `json:"object"`
	Created          int64    `json:"created"`
	Model            string   `json:"model"`
	Choices          []choice `json:"choices"`
	Usage            *usage   `json:"usage"`
	KVTransferParams any      `json:"kv_transfer_params"`
}

type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

// begin reads the request's body and its X-Request-Id; ok false: it answered.
func (s *Server) begin(w http.ResponseWriter, hr *http.Request) (body []byte, reqID string, ok bool) {
	reqID = hr.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randHex(32)
	}
	w.Header().Set("X-Request-Id", reqID)
	if s.closing.Load() {
		writeError(w, &apiError{http.StatusServiceUnavailable, "server_error", "The engine is closing; send the request to another engine.", ""})
		return nil, "", false
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, 64<<20))
	if err != nil {
		writeFieldError(w, badRequest("", "Reading the request body failed (%v); send it again.", err))
		return nil, "", false
	}
	return body, reqID, true
}

func (s *Server) completions(w http.ResponseWriter, hr *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	body, reqID, ok := s.begin(w, hr)
	if !ok {
		return
	}
	var cf commonFields
	var cr completionRequest
	if e := decodeRequest(body, &cf, &cr); e != nil {
		writeFieldError(w, e)
		return
	}
	if s.cfg.TokensOnly && promptIsText(cr.Prompt) {
		writeFieldError(w, badRequest("prompt", msgTextRefused))
		return
	}
	toks, e := parsePrompt(cr.Prompt, s.cfg.VocabSize)
	if e == nil && len(toks) == 0 {
		e = badRequest("prompt", "prompt is empty; send at least one token.")
	}
	var r *request
	if e == nil {
		r, e = s.newRequest(&cf, toks, reqID)
	}
	if e != nil {
		writeFieldError(w, e)
		return
	}
	now := s.cfg.Clock.Now()
	s.serve(w, hr, r, &cf, &completionAnswer{base: chunk{ID: "cmpl-" + reqID, Object: "text_completion", Created: now.Unix(), Model: cf.Model}, noText: s.cfg.TokensOnly})
}

// serve submits r to the engine loop and answers from its events, streamed or
// whole.
func (s *Server) serve(w http.ResponseWriter, hr *http.Request, r *request, cf *commonFields, a answer) {
	now := s.cfg.Clock.Now()
	r.arrival, r.deadline = now, now.Add(s.cfg.RequestTimeout)
	ctx := hr.Context()
	span := s.startSpan(hr, r)
	var answered *apiError
	defer func() { endSpan(span, answered) }()
	if r.kind == kindDecode && hr.Header.Get(TakenInHeader) != "" {
		announceTakenIn(w)
	}
	select {
	case s.submitCh <- r:
	case <-ctx.Done():
		return
	case <-s.loopDone:
		writeError(w, &apiError{http.StatusServiceUnavailable, "server_error", "The engine is closing; send the request to another engine.", ""})
		return
	}
	var toks []int
	var flusher http.Flusher
	streaming := false
	writeChunk := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	var finish string
	var stopReason any
	for {
		var ev event
		select {
		case ev = <-r.events:
		case <-ctx.Done():
			s.cancelRequest(r)
			return
		case <-r.abort:
			s.cancelRequest(r)
			s.answerAborted(w, r, cf, a, toks, streaming, flusher)
			return
		}
		if !ev.end {
			toks = append(toks, ev.tok)
			finish, stopReason = ev.finish, ev.stopReason
			if len(toks) == 1 && r.kind != kindPrefill {
				span.AddEvent(FirstTokenEvent)
			}
			if !cf.Stream {
				continue
			}
			if !streaming {
				streaming = true
				flusher = startStream(w)
				if f := a.first(); f != nil && !writeChunk(f) {
					s.cancelRequest(r)
					return
				}
			}
			for _, c := range a.token(ev.tok, ev.finish, ev.stopReason) {
				if !writeChunk(c) {
					s.cancelRequest(r)
					return
				}
			}
			continue
		}
		answered = ev.err
		u := &usage{PromptTokens: len(r.tokens), CompletionTokens: len(toks), TotalTokens: len(r.tokens) + len(toks)}
		switch {
		case ev.err != nil && !streaming:
			writeError(w, ev.err)
		case ev.err != nil:
			fmt.Fprintf(w, "data: %s\n", errorBody(ev.err.code, ev.err.param, ev.err.msg))
			fmt.Fprint(w, "data: [DONE]\n\n")
			flusher.Flush()
		case cf.Stream:
			if cf.StreamOptions != nil && cf.StreamOptions.IncludeUsage {
				writeChunk(a.usage(u))
			}
			if c, ok := kvParamsChunk(a, ev.params); ok {
				writeChunk(c)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			flusher.Flush()
		default:
			v := a.whole(toks, finish, stopReason, u, ev.params)
			if e, ok := v.(*apiError); ok {
				answered = e
				writeError(w, e)
			} else {
				writeJSON(w, v)
			}
		}
		if ev.params != nil && ctx.Err() != nil {
			s.cancelRequest(r) // nobody got the params: prefill drops the hold
		}
		return
	}
}

// startStream writes an event stream's header and returns the flusher of
// its events.
func startStream(w http.ResponseWriter) http.Flusher {
	flusher, _ := w.(http.Flusher)
	if flusher == nil {
		flusher = nopFlusher{}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return flusher
}

type nopFlusher struct{}

func (nopFlusher) Flush() {}

func (s *Server) cancelRequest(r *request) {
	select {
	case s.cancelCh <- r:
	case <-s.loopDone:
	}
}

// pushMissing names the first kv_transfer_params key a push decode leg
// needs and lacks, "" when none is missing.
func pushMissing(p *connector.Params) string {
	switch {
	case p.RemoteEngineID == "":
		return "remote_engine_id"
	case p.RemoteHost == "":
		return "remote_host"
	case p.RemotePort <= 0:
		return "remote_port"
	case p.TPSize <= 0:
		return "tp_size"
	}
	return ""
}
