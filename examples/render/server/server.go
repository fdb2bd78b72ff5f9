// Package server is the render tier's HTTP server: vLLM 0.34.0's
// /v1/chat/completions/render and /v1/chat/completions/derender over a
// chat.Pipeline, with /health and /metrics, and the Client a proxy uses to
// call it. docs/render.md has the wire formats and the streaming design.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// Config configures a Server. The zero value works: one worker, the default
// chat.Config, any model name accepted.
type Config struct {
	// Workers bounds how many renders and derenders run at once, as vLLM's
	// --renderer-num-workers (default 1).
	Workers int
	// Chat selects tokenizer, template and parsers.
	Chat chat.Config
	// ServedModelName, when set, is the only model name requests may carry
	// (vLLM answers others with 404); "" accepts any.
	ServedModelName string
	// MaxBodyBytes bounds a request body; 0 is 64 MiB.
	MaxBodyBytes int64
	// QueueTimeout bounds the wait for a worker; 0 is 30 s. A request that
	// waits longer gets 503.
	QueueTimeout time.Duration
}

// Server serves the render and derender endpoints.
type Server struct {
	cfg     Config
	p       *chat.Pipeline
	workers chan struct{}
	reg     *prometheus.Registry
	m       metrics
	seq     atomic.Uint64
}

type metrics struct {
	renders, derenders, streamChunks prometheus.Counter
	badRequests                      *prometheus.CounterVec
	busy                             prometheus.Counter
}

// New builds a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("server: Workers %d: want at least 1", cfg.Workers)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = 30 * time.Second
	}
	p, err := chat.New(cfg.Chat)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, p: p, workers: make(chan struct{}, cfg.Workers), reg: prometheus.NewRegistry()}
	s.m.renders = prometheus.NewCounter(prometheus.CounterOpts{Name: "gonixl_render_renders_total", Help: "Chat requests rendered to token ids."})
	s.m.derenders = prometheus.NewCounter(prometheus.CounterOpts{Name: "gonixl_render_derenders_total", Help: "Non-streaming derenders answered."})
	s.m.streamChunks = prometheus.NewCounter(prometheus.CounterOpts{Name: "gonixl_render_stream_chunks_total", Help: "Streaming derender chunks answered."})
	s.m.badRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gonixl_render_bad_requests_total", Help: "Requests refused, by reason."}, []string{"reason"})
	s.m.busy = prometheus.NewCounter(prometheus.CounterOpts{Name: "gonixl_render_worker_wait_timeouts_total", Help: "Requests that waited for a worker past QueueTimeout."})
	s.reg.MustRegister(s.m.renders, s.m.derenders, s.m.streamChunks, s.m.badRequests, s.m.busy)
	return s, nil
}

// Pipeline returns the server's pipeline.
func (s *Server) Pipeline() *chat.Pipeline { return s.p }

// Handler serves POST /v1/chat/completions/render,
// POST /v1/chat/completions/derender, GET /health and GET /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions/render", s.handleRender)
	mux.HandleFunc("POST /v1/chat/completions/derender", s.handleDerender)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return mux
}

// apiError is an answer other than 200: vLLM's ErrorResponse.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
	reason string // metric label
}

func (e *apiError) Error() string { return e.msg }

func badRequest(reason, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: msg, reason: reason}
}

func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	if e.status < 500 {
		s.m.badRequests.WithLabelValues(e.reason).Inc()
	}
	body := map[string]any{"error": map[string]any{"message": e.msg, "type": e.typ, "param": nilIfEmpty(e.param), "code": e.status}}
	writeJSON(w, e.status, body)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// readJSON decodes the body; errors name what was wrong.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSONType(ct) {
		return &apiError{status: http.StatusUnsupportedMediaType, typ: "BadRequestError", reason: "content_type",
			msg: fmt.Sprintf("Unsupported Media Type: Only 'application/json' is allowed, got %q", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, typ: "BadRequestError", reason: "too_large",
				msg: fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
		}
		return badRequest("read", "reading the request body: "+err.Error())
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("json", "request body is not valid JSON for this endpoint: "+err.Error())
	}
	return nil
}

func isJSONType(ct string) bool {
	return len(ct) >= 16 && ct[:16] == "application/json"
}

// acquire takes a worker slot, waiting at most QueueTimeout.
func (s *Server) acquire(ctx context.Context) (func(), *apiError) {
	t := time.NewTimer(s.cfg.QueueTimeout)
	defer t.Stop()
	select {
	case s.workers <- struct{}{}:
		return func() { <-s.workers }, nil
	case <-ctx.Done():
		return nil, &apiError{status: 499, typ: "ClientClosed", msg: "client went away while waiting for a worker", reason: "cancelled"}
	case <-t.C:
		s.m.busy.Inc()
		return nil, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError",
			msg: fmt.Sprintf("no render worker free within %s (workers: %d)", s.cfg.QueueTimeout, s.cfg.Workers)}
	}
}

func (s *Server) checkModel(model string) *apiError {
	if model == "" || s.cfg.ServedModelName == "" || model == s.cfg.ServedModelName {
		return nil
	}
	return &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "model", reason: "model",
		msg: fmt.Sprintf("The model `%s` does not exist. Valid aliases: %s.", model, s.cfg.ServedModelName)}
}

func (s *Server) modelName(m string) string {
	if m != "" {
		return m
	}
	return s.cfg.ServedModelName
}

// chatError maps a chat package error to an answer.
func chatError(reason string, err error) *apiError {
	var bad *chat.BadRequestError
	if errors.As(err, &bad) {
		return badRequest(reason, bad.Msg)
	}
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()}
}
