package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/gonixl/gonixl/examples/render/chat"
)

func (s *Server) handleRender(w http.ResponseWriter, r *http.Request) {
	var req chat.Request
	if e := s.readJSON(w, r, &req); e != nil {
		s.fail(w, e)
		return
	}
	release, e := s.acquire(r.Context())
	if e != nil {
		s.fail(w, e)
		return
	}
	gen, e := s.render(&req)
	release()
	if e != nil {
		s.fail(w, e)
		return
	}
	s.m.renders.Inc()
	writeJSON(w, http.StatusOK, gen)
}

// render follows ServingRender.render_chat_request
// (vllm/entrypoints/scale_out/render/serving.py@0.34.0).
func (s *Server) render(req *chat.Request) (*GenerateRequest, *apiError) {
	if e := s.checkModel(req.Model); e != nil {
		return nil, e
	}
	if req.UseBeamSearch {
		return nil, badRequest("beam_search", "Beam search is not supported by the render endpoint")
	}
	ids, err := s.p.Render(req)
	if err != nil {
		return nil, chatError("render", err)
	}
	maxTokens := s.p.MaxModelLen() - len(ids)
	want := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		want = req.MaxCompletionTokens
	}
	if want != nil {
		if *want < 1 {
			return nil, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: "max_tokens", reason: "max_tokens",
				msg: "max_tokens must be at least 1, got " + itoa(*want) + "."}
		}
		maxTokens = min(maxTokens, *want)
	}
	stop := []string(req.Stop)
	if stop == nil {
		stop = []string{}
	}
	stopIDs := req.StopTokenIDs
	if stopIDs == nil {
		stopIDs = []int{}
	}
	gen := &GenerateRequest{
		RequestID: "chatcmpl-" + requestID(req.RequestID),
		TokenIDs:  ids,
		SamplingParams: SamplingParams{MaxTokens: maxTokens, Stop: stop, StopTokenIDs: stopIDs, N: req.N,
			Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, MinP: req.MinP, Seed: req.Seed,
			IgnoreEOS: req.IgnoreEOS, SkipSpecialTokens: req.SkipSpecialTokens},
		ReturnTokenIDs:   req.ReturnTokenIDs,
		OutputMode:       "tokens",
		Stream:           req.Stream,
		Priority:         req.Priority,
		KVTransferParams: req.KVTransferParams,
	}
	if req.Model != "" {
		gen.Model = &req.Model
	}
	if req.CacheSalt != "" {
		gen.CacheSalt = &req.CacheSalt
	}
	if req.Stream {
		gen.StreamOptions = req.StreamOptions
	}
	kwargs := req.ChatTemplateKwargs
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	if s.p.HasReasoningParser() {
		gen.ReasoningParserKwargs = &ReasoningKwargs{ChatTemplateKwargs: kwargs}
		if !req.EnableThinking() {
			t := true // the template closed <think> in the prompt
			gen.ReasoningEnded = &t
		}
	}
	pc := &ParseContext{Tools: req.Tools, ToolChoice: req.ToolChoice, ParallelToolCalls: true, IncludeReasoning: true,
		ChatTemplateKwargs: kwargs}
	if req.ParallelToolCalls != nil {
		pc.ParallelToolCalls = *req.ParallelToolCalls
	}
	if req.IncludeReasoning != nil {
		pc.IncludeReasoning = *req.IncludeReasoning
	}
	if len(pc.ToolChoice) == 0 {
		pc.ToolChoice = json.RawMessage(`null`)
	}
	for _, m := range req.Messages {
		pc.HistoryToolCallCnt += len(m.ToolCalls)
	}
	gen.ParseContext = pc
	return gen, nil
}

func requestID(given string) string {
	if given != "" {
		return given
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
