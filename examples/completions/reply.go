package completions

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Reply is an assistant message gathered from a chat stream's deltas:
// content, reasoning (vLLM 0.34.0's "reasoning", or "reasoning_content")
// and tool calls (name and argument text, ids left out), and the finish
// reason.
type Reply struct {
	Content, Reasoning string
	ToolCalls          []ToolCall
	FinishReason       string
}

// ToolCall is a streamed tool call, its pieces joined.
type ToolCall struct {
	// Index is the call's "index" in the stream. It may skip values: vLLM
	// numbers a call by its place in the model's output and sends a call only
	// once its name is accepted, so a call whose name is no tool of the
	// request leaves a gap (vllm/parser/engine/parser_engine.py@0.34.0,
	// _emit_name_delta and _handle_tool_end), and parallel_tool_calls=false
	// keeps index 0 alone (vllm/entrypoints/serve/utils/tool_calls_utils.py@0.34.0).
	Index           int
	Name, Arguments string
}

// replyChoice is what StreamReply reads of a chat chunk's choice.
type replyChoice struct {
	Delta struct {
		Content          string `json:"content"`
		Reasoning        string `json:"reasoning"`
		ReasoningContent string `json:"reasoning_content"`
		ToolCalls        []struct {
			Index    int `json:"index"`
			Function *struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// StreamReply sends a whole chat request body (it must set "stream": true)
// to url + /v1/chat/completions and gathers the reply. A tool call's pieces
// are joined by their "index" (vLLM 0.34.0 sends the name first and then
// argument text under the same index, several calls in one delta allowed:
// vllm/entrypoints/generate/base/protocol.py@0.34.0, DeltaToolCall), and the
// calls come out in index order, every index kept. The Sample is timed
// as StreamChat's, except that a chunk counts as a token when it carries
// anything of the message (content, reasoning or a tool call), as a
// reasoning model's first tokens are reasoning.
func StreamReply(ctx context.Context, client *http.Client, url, requestID string, body []byte) (Sample, Reply) {
	var r Reply
	calls := map[int]*ToolCall{}
	textOf := func(line []byte) (string, *int, error) {
		c, usage, err := firstChoice[replyChoice](line)
		if err != nil || c == nil {
			return "", usage, err
		}
		if c.FinishReason != nil {
			r.FinishReason = *c.FinishReason
		}
		d := c.Delta
		reasoning := d.Reasoning + d.ReasoningContent
		r.Content += d.Content
		r.Reasoning += reasoning
		var b strings.Builder
		b.WriteString(d.Content + reasoning)
		for _, tc := range d.ToolCalls {
			call := calls[tc.Index]
			if call == nil {
				call = &ToolCall{Index: tc.Index}
				calls[tc.Index] = call
			}
			if tc.Function != nil {
				call.Name += tc.Function.Name
				call.Arguments += tc.Function.Arguments
				b.WriteString(tc.Function.Name + tc.Function.Arguments)
			}
		}
		return b.String(), usage, nil
	}
	s := post(ctx, client, strings.TrimSuffix(url, "/")+"/v1/chat/completions", requestID, body, Sample{}, textOf)
	for _, i := range slices.Sorted(maps.Keys(calls)) {
		r.ToolCalls = append(r.ToolCalls, *calls[i])
	}
	return s, r
}
