package completions

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatSSE serves lines as one chat stream, each as a "data:" event, then [DONE]; it hands
// the request body to check.
func chatSSE(t *testing.T, lines []string, check func(r *http.Request, body []byte)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		if check != nil {
			check(r, body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range append(lines, "[DONE]") {
			_, _ = io.WriteString(w, "data: "+l+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestStreamChatReadsDeltaContent(t *testing.T) {
	srv := chatSSE(t, []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}`,
	}, func(r *http.Request, body []byte) {
		assert.Equal(t, "/v1/chat/completions", r.URL.Path)
		assert.Equal(t, "c-1", r.Header.Get("X-Request-Id"))
		assert.JSONEq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, string(body))
	})
	s := StreamChat(context.Background(), srv.Client(), srv.URL, "m", "c-1", []Message{{Role: "user", Content: "hi"}}, 4, 2)
	require.NoError(t, s.Err)
	assert.Equal(t, "Hello", s.Text)
	assert.Equal(t, 2, s.OutputTokens)
	assert.Equal(t, 4, s.PromptTokens)
	assert.Len(t, s.ITL, 1, "the role chunk is no token")
}

// StreamReply gathers reasoning (either field name), content and tool calls by index; a
// chunk counts as a token when it carries any of them.
func TestStreamReplyGathersTheMessage(t *testing.T) {
	srv := chatSSE(t, []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning":"Look "}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"it up."}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Checking."}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_weather"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"get_time","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"completion_tokens":9}}`,
	}, nil)
	body, err := json.Marshal(map[string]any{"model": "m", "stream": true})
	require.NoError(t, err)
	s, r := StreamReply(context.Background(), srv.Client(), srv.URL+"/", "r-1", body)
	require.NoError(t, s.Err)
	assert.Equal(t, Reply{Content: "Checking.", Reasoning: "Look it up.", FinishReason: "tool_calls",
		ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Index: 1, Name: "get_time", Arguments: "{}"}}}, r)
	assert.Equal(t, 9, s.OutputTokens)
	assert.Len(t, s.ITL, 6, "7 chunks carry something of the message")
	assert.Equal(t, `Look it up.Checking.get_weather{"city": "Paris"}get_time{}`, s.Text)
}

// vLLM leaves a gap in the tool-call indexes where it dropped a call (a name that is no tool of
// the request); every call is kept under its own index, in index order, whatever order the
// pieces come in and however many one delta carries.
func TestStreamReplyKeepsSparseToolCallIndexes(t *testing.T) {
	srv := chatSSE(t, []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"chatcmpl-tool-3","type":"function","function":{"name":"get_weather"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_time","arguments":"{"}},{"index":3,"function":{"arguments":"{\"city\": "}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"\"Paris\"}"}},{"index":1,"function":{"arguments":"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":6,"id":"chatcmpl-tool-6","type":"function","function":{"name":"noop","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
	}, nil)
	s, r := StreamReply(context.Background(), srv.Client(), srv.URL, "r-2", []byte(`{"stream":true}`))
	require.NoError(t, s.Err)
	assert.Equal(t, Reply{FinishReason: "tool_calls", ToolCalls: []ToolCall{
		{Index: 1, Name: "get_time", Arguments: "{}"},
		{Index: 3, Name: "get_weather", Arguments: `{"city": "Paris"}`},
		{Index: 6, Name: "noop", Arguments: "{}"},
	}}, r)
	assert.Equal(t, `get_weatherget_time{{"city": "Paris"}}noop{}`, s.Text)
}

func TestStreamReplyBadChunk(t *testing.T) {
	srv := chatSSE(t, []string{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, `{"choices":`}, nil)
	s, _ := StreamReply(context.Background(), srv.Client(), srv.URL, "", []byte(`{"stream":true}`))
	require.EqualError(t, s.Err, `chunk "{\"choices\":" is not JSON: unexpected end of JSON input`)
}
