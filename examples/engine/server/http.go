package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gonixl/gonixl/promstats"
	"github.com/gonixl/gonixl/pushconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// apiError is an OpenAI-style error answer.
type apiError struct {
	code int
	typ  string
	msg  string
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": e.msg, "type": e.typ, "code": e.code}})
}

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
		srcs = append(srcs, p.source())
	}
	for _, c := range s.conss {
		srcs = append(srcs, c.source())
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
		counter("gonixl_engine_kv_verify_failures_total", "Requests whose loaded KV differed from the prompt's.", func() float64 { return float64(s.st.verifyFail.Load()) }))
	for _, c := range cs {
		if err := s.reg.Register(c); err != nil {
			return fmt.Errorf("engine: metrics: %w", err)
		}
	}
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		mux.ServeHTTP(w, r)
	})
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS        bool            `json:"ignore_eos"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
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

func parsePrompt(raw json.RawMessage) ([]int, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return Tokenize(text), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		for _, t := range ids {
			if t < 0 || t >= VocabSize {
				return nil, badRequest("prompt token id %d is outside the vocabulary [0, %d)", t, VocabSize)
			}
		}
		return ids, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) == 1 {
		return Tokenize(texts[0]), nil
	}
	var lists [][]int
	if json.Unmarshal(raw, &lists) == nil && len(lists) == 1 {
		return parsePrompt(mustJSON(lists[0]))
	}
	return nil, badRequest("prompt must be a string or a list of token ids (one prompt per request)")
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// parse turns the body into a request for the engine loop.
func (s *Server) parse(body []byte, reqID string) (*request, *completionRequest, *apiError) {
	var cr completionRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, nil, badRequest("invalid JSON body: %v", err)
	}
	if cr.Model == "" {
		cr.Model = s.cfg.ServedModelName
	}
	if cr.Model != s.cfg.ServedModelName {
		return nil, nil, &apiError{http.StatusNotFound, "invalid_request_error", fmt.Sprintf("The model `%s` does not exist.", cr.Model)}
	}
	toks, e := parsePrompt(cr.Prompt)
	if e != nil {
		return nil, nil, e
	}
	if len(toks) == 0 {
		return nil, nil, badRequest("prompt is empty")
	}
	r := &request{id: reqID, engID: reqID + "-" + randHex(8), tokens: toks, maxTokens: DefaultMaxTokens}
	if cr.MaxTokens != nil {
		if *cr.MaxTokens < 1 {
			return nil, nil, badRequest("max_tokens must be at least 1, got %d", *cr.MaxTokens)
		}
		r.maxTokens = *cr.MaxTokens
	}
	kv := bytes.TrimSpace(cr.KVTransferParams)
	if len(kv) > 0 && string(kv) != "null" {
		var f kvFlags
		if err := json.Unmarshal(kv, &f); err != nil {
			return nil, nil, badRequest("kv_transfer_params: %v", err)
		}
		mode := f.TransferMode
		if mode == "" {
			mode = ConnPull
		}
		if (f.DoRemoteDecode || f.DoRemotePrefill) && mode != s.cfg.Connector {
			return nil, nil, badRequest("kv_transfer_params: transfer_mode %q, but this engine's connector is %q", mode, s.cfg.Connector)
		}
		switch {
		case f.DoRemoteDecode && f.DoRemotePrefill:
			return nil, nil, badRequest("kv_transfer_params: do_remote_decode and do_remote_prefill are both set")
		case f.DoRemoteDecode:
			if s.cfg.Role != RolePrefill {
				return nil, nil, badRequest("kv_transfer_params: do_remote_decode sent to a decode (kv_consumer) engine")
			}
			r.kind, r.tid = kindPrefill, f.TransferID
			r.maxTokens = 1
		case f.DoRemotePrefill:
			if s.cfg.Role != RoleDecode {
				return nil, nil, badRequest("kv_transfer_params: do_remote_prefill sent to a prefill (kv_producer) engine")
			}
			r.kind, r.tid = kindDecode, f.TransferID
			if s.cfg.Connector == ConnPull {
				if err := json.Unmarshal(kv, &r.pull); err != nil {
					return nil, nil, badRequest("kv_transfer_params: %v", err)
				}
				if err := r.pull.Validate(); err != nil {
					return nil, nil, badRequest("kv_transfer_params: %v", err)
				}
				if n := blocksFor(len(toks), s.cfg.Model.BlockSize); r.pull.NumTokens == 0 && len(r.pull.RemoteBlockIDs) != n {
					// Equal block sizes: one remote block per local prompt block.
					s.log.Debug("remote block count differs from the prompt's", zap.Int("remote", len(r.pull.RemoteBlockIDs)), zap.Int("local", n))
				}
			} else {
				r.push = pushconn.Prefill{EngineID: f.RemoteEngineID, Host: f.RemoteHost, Port: f.RemotePort, TPSize: f.TPSize, PPSize: f.PPSize}
				if r.push.PPSize == 0 {
					r.push.PPSize = 1
				}
				if r.push.EngineID == "" || r.push.Host == "" || r.push.Port <= 0 || r.push.TPSize <= 0 {
					return nil, nil, badRequest("kv_transfer_params: push decode needs remote_engine_id, remote_host, remote_port and tp_size, got %s", kv)
				}
			}
		}
	}
	r.ph = prefixHashes(toks)
	r.events = make(chan event, r.maxTokens+2)
	return r, &cr, nil
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

func (s *Server) completions(w http.ResponseWriter, hr *http.Request) {
	reqID := hr.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = randHex(32)
	}
	w.Header().Set("X-Request-Id", reqID)
	s.active.Add(1)
	defer s.active.Add(-1)
	if s.closing.Load() {
		writeError(w, &apiError{http.StatusServiceUnavailable, "server_error", "engine closing"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, 64<<20))
	if err != nil {
		writeError(w, badRequest("reading the body: %v", err))
		return
	}
	r, cr, e := s.parse(body, reqID)
	if e != nil {
		writeError(w, e)
		return
	}
	now := s.cfg.Clock.Now()
	r.arrival, r.deadline = now, now.Add(s.cfg.RequestTimeout)
	ctx := hr.Context()
	select {
	case s.submitCh <- r:
	case <-ctx.Done():
		return
	case <-s.loopDone:
		writeError(w, &apiError{http.StatusServiceUnavailable, "server_error", "engine closing"})
		return
	}
	base := chunk{ID: "cmpl-" + reqID, Object: "text_completion", Created: now.Unix(), Model: cr.Model}
	var toks []string
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
	length := "length"
	for {
		var ev event
		select {
		case ev = <-r.events:
		case <-ctx.Done():
			s.cancelRequest(r)
			return
		}
		if !ev.end {
			text := Detokenize(ev.tok)
			if len(toks) > 0 {
				text = " " + text
			}
			toks = append(toks, text)
			if !cr.Stream {
				continue
			}
			if !streaming {
				streaming = true
				flusher, _ = w.(http.Flusher)
				if flusher == nil {
					flusher = nopFlusher{}
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
			}
			c := base
			c.Choices = []choice{{Text: text}}
			if len(toks) == r.maxTokens {
				c.Choices[0].FinishReason = &length
			}
			if !writeChunk(c) {
				s.cancelRequest(r)
				return
			}
			continue
		}
		u := &usage{PromptTokens: len(r.tokens), CompletionTokens: len(toks), TotalTokens: len(r.tokens) + len(toks)}
		switch {
		case ev.err != nil && !streaming:
			writeError(w, ev.err)
		case ev.err != nil:
			writeChunk(map[string]any{"error": map[string]any{"message": ev.err.msg, "type": ev.err.typ, "code": ev.err.code}})
			fmt.Fprint(w, "data: [DONE]\n\n")
			flusher.Flush()
		case cr.Stream:
			if cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage {
				c := base
				c.Choices, c.Usage = []choice{}, u
				writeChunk(c)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			flusher.Flush()
		default:
			writeJSON(w, completion{ID: base.ID, Object: base.Object, Created: base.Created, Model: base.Model,
				Choices: []choice{{Text: strings.Join(toks, ""), FinishReason: &length}}, Usage: u, KVTransferParams: ev.params})
		}
		if ev.params != nil && ctx.Err() != nil {
			s.cancelRequest(r) // nobody got the params: prefill drops the hold
		}
		return
	}
}

type nopFlusher struct{}

func (nopFlusher) Flush() {}

func (s *Server) cancelRequest(r *request) {
	select {
	case s.cancelCh <- r:
	case <-s.loopDone:
	}
}
