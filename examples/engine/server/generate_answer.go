package server

// The answers of POST /inference/v1/generate in output_mode "tokens", field
// for field and in the order vLLM's pydantic models write them
// (GenerateTokensResponse and GenerateTokensStreamResponse,
// token_in_token_out/protocol.py@0.34.0): null fields that vLLM writes as
// null are written so, those it leaves out are left out.

// generateUsage is vLLM's UsageInfo as a whole answer writes it
// (prompt_tokens_details left out when unset, completion_tokens_details
// null).
type generateUsage struct {
	PromptTokens            int `json:"prompt_tokens"`
	TotalTokens             int `json:"total_tokens"`
	CompletionTokens        int `json:"completion_tokens"`
	CompletionTokensDetails any `json:"completion_tokens_details"`
}

// generateUsageFinal is UsageInfo as the stream's usage chunk writes it
// (exclude_none: no null details).
type generateUsageFinal struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type generateChoice struct {
	Index          int   `json:"index"`
	FinishReason   any   `json:"finish_reason"` // a string, null in a stream's middle chunks
	StopReason     any   `json:"stop_reason"`
	TokenIDs       []int `json:"token_ids"`
	RoutedExperts  any   `json:"routed_experts"`
	SamplingMask   any   `json:"sampling_mask"`
	WeightVersions any   `json:"weight_versions"`
	Logprobs       any   `json:"logprobs"`
}

// GenerateResponse is a whole answer of POST /inference/v1/generate.
type generateResponse struct {
	RequestID             string           `json:"request_id"`
	Model                 string           `json:"model"`
	Created               int64            `json:"created"`
	Usage                 generateUsage    `json:"usage"`
	PromptLogprobs        any              `json:"prompt_logprobs"`
	PromptTokenIDLogprobs any              `json:"prompt_token_id_logprobs"`
	PromptTokenIDs        []int            `json:"prompt_token_ids"`
	MMPlaceholders        any              `json:"mm_placeholders"`
	Metrics               any              `json:"metrics"`
	KVTransferParams      any              `json:"kv_transfer_params"`
	ECTransferParams      any              `json:"ec_transfer_params"`
	OutputMode            string           `json:"output_mode"`
	Choices               []generateChoice `json:"choices"`
}

// generateChunk is one event of a streamed answer.
type generateChunk struct {
	RequestID      string           `json:"request_id"`
	Usage          any              `json:"usage"`
	PromptTokenIDs []int            `json:"prompt_token_ids,omitempty"`
	OutputMode     string           `json:"output_mode"`
	Choices        []generateChoice `json:"choices"`
}

// generateUsageChunk is the stream's closing usage event (exclude_none).
type generateUsageChunk struct {
	RequestID  string             `json:"request_id"`
	Usage      generateUsageFinal `json:"usage"`
	OutputMode string             `json:"output_mode"`
	Choices    []generateChoice   `json:"choices"`
}

// generateAnswer renders a generate request's answers.
type generateAnswer struct {
	id         string // generate-tokens-<X-Request-Id or request_id>
	model      string
	created    int64
	prompt     int   // prompt tokens
	promptIDs  []int // return_token_ids: on the whole answer, or the stream's first chunk
	continuous bool  // stream_options.continuous_usage_stats
	n          int   // tokens streamed so far
}

func (a *generateAnswer) first() any { return nil }

func (a *generateAnswer) token(tok int, finish string, stopReason any) []any {
	a.n++
	c := generateChunk{RequestID: a.id, OutputMode: "tokens",
		Choices: []generateChoice{{FinishReason: finishOrNull(finish), StopReason: stopReason, TokenIDs: []int{tok}}}}
	if a.n == 1 {
		c.PromptTokenIDs = a.promptIDs
	}
	if a.continuous {
		c.Usage = generateUsage{PromptTokens: a.prompt, CompletionTokens: a.n, TotalTokens: a.prompt + a.n}
	}
	return []any{c}
}

func (a *generateAnswer) usage(u *usage) any {
	return generateUsageChunk{RequestID: a.id, OutputMode: "tokens", Choices: []generateChoice{},
		Usage: generateUsageFinal{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}}
}

func (a *generateAnswer) whole(toks []int, finish string, stopReason any, u *usage, params any) any {
	return generateResponse{RequestID: a.id, Model: a.model, Created: a.created,
		Usage:          generateUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens},
		PromptTokenIDs: a.promptIDs, KVTransferParams: params, OutputMode: "tokens",
		Choices: []generateChoice{{FinishReason: finishOrNull(finish), StopReason: stopReason, TokenIDs: toks}}}
}

// finishOrNull is finish, or JSON null when "".
func finishOrNull(finish string) any {
	if finish == "" {
		return nil
	}
	return finish
}
