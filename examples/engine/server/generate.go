package server

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// The token-in/token-out endpoint, vLLM's POST /inference/v1/generate
// (vllm/entrypoints/scale_out/token_in_token_out/{protocol,serving,
// api_router}.py@0.34.0; docs/engine.md, "Tokens-only mode"): token ids in,
// token ids out, kv_transfer_params at the request's top level and in the
// answer's, so that a proxy runs P/D legs on it as on /v1/completions.

const generatePath = "/inference/v1/generate"

// Messages a tokens-only server answers, vLLM's words
// (token_in_token_out/serving.py@0.34.0, renderers/base.py@0.34.0).
const (
	msgStopStrings = "stop strings are not supported on a --tokens-only server because detokenization is disabled. Check stop strings on the coordinator, or use stop_token_ids."
	msgNoTokenizer = "Tokenizer not available when `skip_tokenizer_init=True`"
	// msgTextRefused is what this engine adds: what to do instead.
	msgTextRefused = msgNoTokenizer + ": this engine runs tokens-only and loads no tokenizer; send token ids to POST " + generatePath + " (a render server's /v1/chat/completions/render makes them from a chat)."
)

// generateRequest is GenerateRequest's fields that this engine reads; the
// rest (cache_salt, priority, parse_context, ...) are accepted and ignored,
// as vLLM ignores parse_context in output_mode "tokens".
type generateRequest struct {
	RequestID      string          `json:"request_id"`
	TokenIDs       json.RawMessage `json:"token_ids"`
	SamplingParams json.RawMessage `json:"sampling_params"`
	Model          string          `json:"model"`
	OutputMode     *string         `json:"output_mode"`
	Stream         *bool           `json:"stream"`
	StreamOptions  *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	ReturnTokenIDs   *bool           `json:"return_token_ids"`
	Features         json.RawMessage `json:"features"`
	ContentParts     json.RawMessage `json:"content_parts"`
}

// samplingParams is the part of vLLM's SamplingParams this engine honours;
// the others (temperature, seed, ...) change nothing in a simulation whose
// tokens the KV decides.
type samplingParams struct {
	MaxTokens    *int            `json:"max_tokens"`
	N            *int            `json:"n"`
	Stop         json.RawMessage `json:"stop"`
	StopTokenIDs []int           `json:"stop_token_ids"`
	IgnoreEOS    bool            `json:"ignore_eos"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// hasStopStrings says whether a SamplingParams stop holds any string: a
// string, or a non-empty list (vLLM turns a string into a one-item list and
// refuses any non-empty list).
func hasStopStrings(raw json.RawMessage) bool {
	if isNull(raw) {
		return false
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		return len(list) > 0
	}
	return true
}

// generate serves POST /inference/v1/generate.
func (s *Server) generate(w http.ResponseWriter, hr *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	if !s.cfg.TokensOnly {
		writeErrorBody(w, http.StatusForbidden, "", scaleOutOff(generatePath))
		return
	}
	body, reqID, ok := s.begin(w, hr)
	if !ok {
		return
	}
	r, cf, a, e := s.generateRequest(body, reqID, hr.Header.Get("X-Request-Id") != "")
	if e != nil {
		writeFieldError(w, e)
		return
	}
	r.abort = make(chan struct{})
	defer s.gens.add(a.id, r)()
	s.serve(w, hr, r, cf, a)
}

// generateRequest checks a generate request in vLLM's order (the schema,
// the model, n, stop strings, output_mode) and builds the engine's request.
// fromHeader: reqID came from X-Request-Id, which wins over the body's
// request_id as in vLLM.
func (s *Server) generateRequest(body []byte, reqID string, fromHeader bool) (*request, *commonFields, *generateAnswer, *fieldError) {
	var g generateRequest
	if e := decodeJSON(body, &g, ""); e != nil {
		return nil, nil, nil, e
	}
	if isNull(g.TokenIDs) {
		return nil, nil, nil, badRequest("token_ids", "token_ids is required; send the prompt's token ids (a render server's /render makes them).")
	}
	var toks []int
	if e := decodeJSON(g.TokenIDs, &toks, "token_ids"); e != nil {
		return nil, nil, nil, badRequest("token_ids", "token_ids must be a list of token ids.")
	}
	if len(toks) == 0 {
		return nil, nil, nil, badRequest("token_ids", "token_ids is empty; send at least one token id.")
	}
	if e := checkTokenIDs("token_ids", toks, s.cfg.VocabSize); e != nil {
		return nil, nil, nil, e
	}
	if isNull(g.SamplingParams) {
		return nil, nil, nil, badRequest("sampling_params", `sampling_params is required; send at least {"max_tokens": N}.`)
	}
	var sp samplingParams
	if e := decodeJSON(g.SamplingParams, &sp, "sampling_params."); e != nil {
		return nil, nil, nil, e
	}
	mode := "tokens"
	if g.OutputMode != nil {
		mode = *g.OutputMode
	}
	if mode != "tokens" && mode != "text" && mode != "derender" {
		return nil, nil, nil, badRequest("output_mode", "output_mode is %q; use \"tokens\" (or \"text\" or \"derender\" on a server with a tokenizer).", mode)
	}
	if !isNull(g.Features) || !isNull(g.ContentParts) {
		return nil, nil, nil, badRequest("features", "features and content_parts (multimodal input) are not supported: this engine takes text-only prompts as token ids.")
	}
	cf := &commonFields{Model: g.Model, MaxTokens: sp.MaxTokens, N: sp.N, IgnoreEOS: sp.IgnoreEOS,
		KVTransferParams: g.KVTransferParams, promptParam: "token_ids", maxTokensParam: "sampling_params.max_tokens"}
	if g.Stream != nil {
		cf.Stream = *g.Stream
	}
	if g.StreamOptions != nil {
		cf.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{g.StreamOptions.IncludeUsage}
	}
	if cf.Model == "" {
		cf.Model = s.cfg.ServedModelName
	}
	if cf.Model != s.cfg.ServedModelName {
		return nil, nil, nil, &fieldError{http.StatusNotFound, "model", "The model `" + cf.Model + "` does not exist; this engine serves `" + s.cfg.ServedModelName + "` (GET /v1/models)."}
	}
	if sp.N != nil && *sp.N != 1 {
		return nil, nil, nil, badRequest("sampling_params.n", "sampling_params.n must be 1, got %d: this engine returns one choice per request.", *sp.N)
	}
	if sp.MaxTokens != nil && *sp.MaxTokens < 1 {
		return nil, nil, nil, badRequest("sampling_params.max_tokens", "sampling_params.max_tokens must be at least 1, got %d.", *sp.MaxTokens)
	}
	if hasStopStrings(sp.Stop) {
		return nil, nil, nil, badRequest("sampling_params.stop", msgStopStrings)
	}
	if mode != "tokens" {
		return nil, nil, nil, badRequest("output_mode", "output_mode=%q requires a tokenizer, but this server does not load one (--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a tokenizer, or use output_mode='tokens'.", mode)
	}
	if e := checkTokenIDs("sampling_params.stop_token_ids", sp.StopTokenIDs, s.cfg.VocabSize); e != nil {
		return nil, nil, nil, e
	}
	id := reqID
	if !fromHeader && g.RequestID != "" {
		id = g.RequestID
	}
	r, e := s.newRequest(cf, toks, id)
	if e != nil {
		return nil, nil, nil, e
	}
	r.gen.stopTokens = sp.StopTokenIDs
	a := &generateAnswer{id: "generate-tokens-" + id, model: cf.Model, created: s.cfg.Clock.Now().Unix(), prompt: len(toks),
		continuous: g.StreamOptions != nil && g.StreamOptions.ContinuousUsageStats}
	if g.ReturnTokenIDs != nil && *g.ReturnTokenIDs {
		a.promptIDs = toks
	}
	return r, cf, a, nil
}
