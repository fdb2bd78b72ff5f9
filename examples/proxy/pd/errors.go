package pd

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/gonixl/gonixl/examples/apierror"
)

// The proxy answers its own errors with the engines' shape and vocabulary
// (package apierror); an engine's own 4xx answer is passed through as it is.

// errorJSON is the body of an error answer (or of a stream's error event),
// newline-terminated; param "" is null.
func errorJSON(status int, param, msg string) []byte { return apierror.Body(status, param, msg) }

// writeError answers with an error not tied to one request field.
func writeError(w http.ResponseWriter, status int, msg string) { writeParamError(w, status, "", msg) }

// writeParamError answers with an error about the request field param.
func writeParamError(w http.ResponseWriter, status int, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorJSON(status, param, msg))
}

// serveModels proxies GET /v1/models from a decode engine in rotation.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	de, release := p.pick(p.pools().decode, &p.rrDecode, PolicyRoundRobin, nil)
	if de == nil {
		writeError(w, http.StatusServiceUnavailable, "no decode engine in rotation")
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, de.url+"/v1/models", nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		status := http.StatusBadGateway
		if ctx.Err() != nil {
			status = http.StatusGatewayTimeout
		}
		writeError(w, status, "decode engine "+de.url+": GET /v1/models: "+err.Error())
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		writeError(w, http.StatusBadGateway, "decode engine "+de.url+": GET /v1/models: "+err.Error())
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}
