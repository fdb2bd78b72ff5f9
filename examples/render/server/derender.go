package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// Error texts of vllm/entrypoints/scale_out/derender/serving.py@0.34.0.
const (
	errNeedChatRequest = "chat_request is required when a tool or reasoning parser is " +
		"configured because plain detokenization would leak raw parser " +
		"markup into content."
	errNeedPromptIDs = "prompt_token_ids is required when a tool or reasoning " +
		"parser is configured. Without it parse_delta cannot tell " +
		"whether the prompt left reasoning open (e.g. a chat " +
		"template that pre-opens <think>) and would misclassify " +
		"reasoning content as plain content."
	errStreamStop = "stop strings are not supported by streaming derender because text " +
		"already sent cannot be cut. Use non-streaming derender or " +
		"output_mode=text on /inference/v1/generate which holds stop strings back."
)

func (s *Server) handleDerender(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if e := s.readJSON(w, r, &raw); e != nil {
		s.fail(w, e)
		return
	}
	var head struct {
		Stream *bool `json:"stream"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		s.fail(w, badRequest("json", "request body is not valid JSON for this endpoint: "+err.Error()))
		return
	}
	stream := head.Stream != nil && *head.Stream
	release, e := s.acquire(r.Context())
	if e != nil {
		s.fail(w, e)
		return
	}
	defer release()
	if stream {
		var req DerenderChatStreamRequest
		if err := strictDecode(raw, &req); err != nil {
			s.fail(w, badRequest("json", "request body is not a streaming derender request: "+err.Error()))
			return
		}
		resp, e := s.derenderStream(&req)
		if e != nil {
			s.fail(w, e)
			return
		}
		s.m.streamChunks.Inc()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	var req DerenderChatRequest
	if err := strictDecode(raw, &req); err != nil {
		s.fail(w, badRequest("json", "request body is not a derender request: "+err.Error()))
		return
	}
	resp, e := s.derender(&req)
	if e != nil {
		s.fail(w, e)
		return
	}
	s.m.derenders.Inc()
	writeJSON(w, http.StatusOK, resp)
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	return dec.Decode(v)
}

// derender follows ServingDerender.derender_chat_response.
func (s *Server) derender(req *DerenderChatRequest) (*ChatCompletionResponse, *apiError) {
	if e := s.checkModel(req.Model); e != nil {
		return nil, e
	}
	max := s.p.MaxModelLen()
	for _, ch := range req.GenerateResponse.Choices {
		if len(ch.TokenIDs) > max {
			return nil, badRequest("too_long", fmt.Sprintf("token_ids length (%d) in choice %d exceeds max_model_len (%d).", len(ch.TokenIDs), ch.Index, max))
		}
	}
	if len(req.PromptTokenIDs) > max {
		return nil, badRequest("too_long", fmt.Sprintf("prompt_token_ids length (%d) exceeds max_model_len (%d).", len(req.PromptTokenIDs), max))
	}
	if s.p.HasParser() && req.ChatRequest == nil {
		return nil, badRequest("no_chat_request", errNeedChatRequest)
	}
	creq := req.ChatRequest
	if creq == nil {
		creq = &chat.Request{}
	}
	resp := &ChatCompletionResponse{ID: req.GenerateResponse.RequestID, Object: "chat.completion", Created: time.Now().Unix(),
		Model: s.modelName(req.Model), Choices: []ChatChoice{}, KVTransferParams: req.GenerateResponse.KVTransferParams}
	for _, ch := range req.GenerateResponse.Choices {
		msg, err := s.p.Derender(creq, ch.TokenIDs)
		if err != nil {
			return nil, chatError("tokens", err)
		}
		finish := "stop"
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
		if len(msg.ToolCalls) > 0 && finish == "stop" {
			finish = "tool_calls"
		}
		stop := ch.StopReason
		if len(stop) == 0 {
			stop = json.RawMessage("null")
		}
		resp.Choices = append(resp.Choices, ChatChoice{Index: ch.Index, Message: msg, FinishReason: &finish, StopReason: stop})
		resp.Usage.CompletionTokens += len(ch.TokenIDs)
	}
	resp.Usage.PromptTokens = promptTokens(req.PromptTokens, req.GenerateResponse.Usage)
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	return resp, nil
}

// promptTokens is resolve_prompt_tokens: the given count, else the
// response's usage, else 0.
func promptTokens(given *int, u *Usage) int {
	if given != nil {
		return *given
	}
	if u != nil {
		return u.PromptTokens
	}
	return 0
}

// derenderStream follows ServingDerender.derender_chat_stream_response:
// stateless, so the parser path rebuilds the parsers and replays the carried
// output tokens in their original chunks before the new one.
func (s *Server) derenderStream(req *DerenderChatStreamRequest) (*DerenderChatStreamResponse, *apiError) {
	if e := s.checkModel(req.Model); e != nil {
		return nil, e
	}
	if req.ChatRequest != nil && len(req.ChatRequest.Stop) > 0 {
		return nil, badRequest("stream_stop", errStreamStop)
	}
	if s.p.HasParser() && req.ChatRequest == nil {
		return nil, badRequest("no_chat_request", errNeedChatRequest)
	}
	if s.p.HasParser() && req.PromptTokenIDs == nil {
		return nil, badRequest("no_prompt_ids", errNeedPromptIDs)
	}
	chunk := req.GenerateChunk
	if len(chunk.Choices) > 1 {
		return nil, badRequest("choices", fmt.Sprintf("derender_chat_stream expects at most one choice per chunk (got %d).", len(chunk.Choices)))
	}
	st := StreamState{}
	if req.StreamState != nil {
		st = *req.StreamState
	}
	if e := validateState(&st); e != nil {
		return nil, e
	}
	delta := 0
	for _, c := range chunk.Choices {
		delta += len(c.TokenIDs)
	}
	if max := s.p.MaxModelLen(); len(req.PromptTokenIDs)+len(st.OutputTokenIDs)+delta > max {
		return nil, badRequest("too_long", fmt.Sprintf("prompt_token_ids length (%d) plus output_token_ids length (%d) plus delta (%d) exceeds max_model_len (%d).",
			len(req.PromptTokenIDs), len(st.OutputTokenIDs), delta, max))
	}
	creq := req.ChatRequest
	if creq == nil {
		creq = &chat.Request{}
	}
	out := &DerenderChatStreamResponse{Chunk: ChatCompletionChunk{ID: chunk.RequestID, Object: "chat.completion.chunk",
		Created: time.Now().Unix(), Model: s.modelName(req.Model), Choices: []ChunkChoice{}}}
	stream := s.p.NewStream(creq)
	off := 0
	for _, n := range st.OutputChunkLens {
		if _, err := stream.Next(st.OutputTokenIDs[off : off+n]); err != nil {
			return nil, badRequest("stream_state", "invalid stream_state: derender failed")
		}
		off += n
	}
	for _, c := range chunk.Choices {
		d, err := stream.Next(c.TokenIDs)
		if err != nil {
			return nil, chatError("tokens", err)
		}
		if c.FinishReason != nil {
			f := stream.Finish()
			d.Content += f.Content
			d.Reasoning += f.Reasoning
			d.ToolCalls = append(d.ToolCalls, f.ToolCalls...)
		}
		for i := range d.ToolCalls {
			tc := &d.ToolCalls[i]
			if tc.ID == "" {
				continue
			}
			if tc.Index < len(st.LastToolCallIDs) {
				tc.ID = st.LastToolCallIDs[tc.Index] // replay re-creates the call: keep its first id
			} else {
				st.LastToolCallIDs = append(st.LastToolCallIDs, tc.ID)
			}
		}
		cd := ChunkDelta{Delta: d}
		if !st.RoleSent {
			cd.Role = "assistant"
			st.RoleSent = true
		}
		if len(d.ToolCalls) > 0 {
			st.ToolsStreamed = true
		}
		finish := c.FinishReason
		if finish != nil && *finish == "stop" && st.ToolsStreamed {
			tc := "tool_calls"
			finish = &tc
		}
		out.Chunk.Choices = append(out.Chunk.Choices, ChunkChoice{Index: c.Index, Delta: cd, FinishReason: finish})
		if len(c.TokenIDs) > 0 {
			st.OutputTokenIDs = append(st.OutputTokenIDs, c.TokenIDs...)
			st.OutputChunkLens = append(st.OutputChunkLens, len(c.TokenIDs))
		}
	}
	if chunk.Usage != nil {
		u := *chunk.Usage
		u.PromptTokens = promptTokens(req.PromptTokens, chunk.Usage)
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		out.Chunk.Usage = &u
	}
	normalizeState(&st)
	out.StreamState = st
	return out, nil
}

// validateState checks what DerenderStreamState's validators check.
func validateState(st *StreamState) *apiError {
	if len(st.PrevTokenIDs) > 1024 {
		return badRequest("stream_state", fmt.Sprintf("prev_token_ids length (%d) exceeds maximum (1024)", len(st.PrevTokenIDs)))
	}
	sum := 0
	for _, n := range st.OutputChunkLens {
		if n <= 0 {
			return badRequest("stream_state", "output_chunk_lens entries must be greater than 0")
		}
		sum += n
	}
	if sum != len(st.OutputTokenIDs) {
		return badRequest("stream_state", fmt.Sprintf("output_chunk_lens must sum to len(output_token_ids) (got sum=%d, len(output_token_ids)=%d)", sum, len(st.OutputTokenIDs)))
	}
	return nil
}

// normalizeState writes [] rather than null for the lists, as pydantic does.
func normalizeState(st *StreamState) {
	if st.PrevTokenIDs == nil {
		st.PrevTokenIDs = []int{}
	}
	if st.OutputTokenIDs == nil {
		st.OutputTokenIDs = []int{}
	}
	if st.OutputChunkLens == nil {
		st.OutputChunkLens = []int{}
	}
	if st.LastToolCallIDs == nil {
		st.LastToolCallIDs = []string{}
	}
}
