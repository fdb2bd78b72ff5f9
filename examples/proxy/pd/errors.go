package pd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// writeError answers with an OpenAI-style error: {"error":{"message","type","code"}}.
func writeError(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{
		http.StatusBadRequest:          "BadRequestError",
		http.StatusNotFound:            "NotFoundError",
		http.StatusMethodNotAllowed:    "MethodNotAllowedError",
		http.StatusBadGateway:          "BadGatewayError",
		http.StatusServiceUnavailable:  "ServiceUnavailableError",
		http.StatusGatewayTimeout:      "GatewayTimeoutError",
		http.StatusInternalServerError: "InternalServerError",
	}[status]
	if typ == "" {
		typ = "Error"
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
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
