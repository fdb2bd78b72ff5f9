package server

import (
	"encoding/json"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// GenerateRequest is what /v1/chat/completions/render answers and
// /inference/v1/generate takes (GenerateRequest in
// vllm/entrypoints/scale_out/token_in_token_out/protocol.py@0.34.0), the
// fields a text-only chat request fills.
type GenerateRequest struct {
	RequestID             string           `json:"request_id"`
	TokenIDs              []int            `json:"token_ids"`
	SamplingParams        SamplingParams   `json:"sampling_params"`
	Model                 *string          `json:"model"`
	ReasoningEnded        *bool            `json:"reasoning_ended"`
	ReasoningParserKwargs *ReasoningKwargs `json:"reasoning_parser_kwargs"`
	ReturnTokenIDs        *bool            `json:"return_token_ids"`
	OutputMode            string           `json:"output_mode"`
	ParseContext          *ParseContext    `json:"parse_context"`
	Stream                bool             `json:"stream"`
	StreamOptions         json.RawMessage  `json:"stream_options"`
	CacheSalt             *string          `json:"cache_salt"`
	Priority              int              `json:"priority"`
	KVTransferParams      json.RawMessage  `json:"kv_transfer_params"`
}

// ReasoningKwargs is ReasoningParserKwargs: the template kwargs the prompt
// was rendered with, so the engine's parser agrees on enable_thinking.
type ReasoningKwargs struct {
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
}

// ParseContext is the chat context /render hands on for derendering.
type ParseContext struct {
	Tools              []chat.Tool     `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	IncludeReasoning   bool            `json:"include_reasoning"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
	HistoryToolCallCnt int             `json:"history_tool_call_cnt"`
}

// SamplingParams are the sampling fields the request set, plus max_tokens,
// stop and stop_token_ids, which render always resolves; absent fields take
// vLLM's SamplingParams defaults on the engine.
type SamplingParams struct {
	MaxTokens         int      `json:"max_tokens"`
	Stop              []string `json:"stop"`
	StopTokenIDs      []int    `json:"stop_token_ids"`
	N                 *int     `json:"n,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	Seed              *int64   `json:"seed,omitempty"`
	IgnoreEOS         bool     `json:"ignore_eos,omitempty"`
	SkipSpecialTokens *bool    `json:"skip_special_tokens,omitempty"`
}

// GenerateTokensResponse is the non-streaming answer of
// /inference/v1/generate with output_mode "tokens".
type GenerateTokensResponse struct {
	RequestID        string          `json:"request_id"`
	OutputMode       string          `json:"output_mode,omitempty"`
	Choices          []TokensChoice  `json:"choices"`
	Usage            *Usage          `json:"usage,omitempty"`
	PromptTokenIDs   []int           `json:"prompt_token_ids,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// TokensChoice is one generated sequence as token ids. FinishReason is
// "stop" when absent (vLLM's default for a complete response).
type TokensChoice struct {
	Index        int             `json:"index"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
	TokenIDs     []int           `json:"token_ids"`
}

// Usage is OpenAI's token accounting.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// DerenderChatRequest is the body of /v1/chat/completions/derender
// (stream false or absent).
type DerenderChatRequest struct {
	Stream           bool                   `json:"stream"`
	Model            string                 `json:"model,omitempty"`
	GenerateResponse GenerateTokensResponse `json:"generate_response"`
	PromptTokens     *int                   `json:"prompt_tokens,omitempty"`
	PromptTokenIDs   []int                  `json:"prompt_token_ids,omitempty"`
	ChatRequest      *chat.Request          `json:"chat_request,omitempty"`
}

// ChatCompletionResponse is the non-streaming derender answer.
type ChatCompletionResponse struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	Created          int64           `json:"created"`
	Model            string          `json:"model"`
	Choices          []ChatChoice    `json:"choices"`
	Usage            Usage           `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one derendered choice.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      chat.Message    `json:"message"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
}

// DerenderChatStreamRequest is one streamed chunk's derender request
// (stream true): the generate chunk plus the state the previous answer
// returned.
type DerenderChatStreamRequest struct {
	Stream         bool                   `json:"stream"`
	Model          string                 `json:"model,omitempty"`
	GenerateChunk  GenerateTokensResponse `json:"generate_chunk"`
	StreamState    *StreamState           `json:"stream_state,omitempty"`
	PromptTokens   *int                   `json:"prompt_tokens,omitempty"`
	PromptTokenIDs []int                  `json:"prompt_token_ids,omitempty"`
	ChatRequest    *chat.Request          `json:"chat_request,omitempty"`
}

// StreamState is DerenderStreamState: the client carries it between chunks.
// The parser path replays OutputTokenIDs in OutputChunkLens boundaries, as
// vLLM does; see docs/render.md for why our Client keeps a chat.Stream
// instead.
type StreamState struct {
	PrevTokenIDs    []int    `json:"prev_token_ids"`
	PrefixOffset    int      `json:"prefix_offset"`
	ReadOffset      int      `json:"read_offset"`
	RoleSent        bool     `json:"role_sent"`
	OutputTokenIDs  []int    `json:"output_token_ids"`
	OutputChunkLens []int    `json:"output_chunk_lens"`
	ToolsStreamed   bool     `json:"tools_streamed"`
	LastToolCallIDs []string `json:"last_tool_call_ids"`
}

// DerenderChatStreamResponse pairs the derendered chunk with the new state.
type DerenderChatStreamResponse struct {
	Chunk       ChatCompletionChunk `json:"chunk"`
	StreamState StreamState         `json:"stream_state"`
}

// ChatCompletionChunk is one chat.completion.chunk.
type ChatCompletionChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

// ChunkChoice is one choice of a chunk.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is chat.Delta plus the role of the first chunk.
type ChunkDelta struct {
	Role string `json:"role,omitempty"`
	chat.Delta
}
