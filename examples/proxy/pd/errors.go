package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// The proxy answers its own errors with OpenAI's shape, as the engines of
// examples/engine do,
//
//	{"error":{"message":"...","type":"...","param":null,"code":502}}
//
// with two of OpenAI's types: invalid_request_error for every 4xx (the client
// can fix the request) and server_error for every 5xx (an engine failed or
// none is in rotation; retrying may help). param names the request field at
// fault, null when none is; code is the HTTP status, as vLLM sends it. An
// engine's own 4xx answer is passed through as it is.

// errorType is the OpenAI error type of an HTTP status.
func errorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// errorJSON is the body of an error answer (or of a stream's error event),
// newline-terminated; param "" is null.
func errorJSON(status int, param, msg string) []byte {
	d := errorDetail{Message: msg, Type: errorType(status), Code: status}
	if param != "" {
		d.Param = &param
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]errorDetail{"error": d})
	return b.Bytes()
}

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
