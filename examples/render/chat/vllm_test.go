package chat

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// vllmPython is the venv with vLLM 0.34.0 (see docs/render.md).
const vllmPython = "/opt/gonixl-vllm/bin/python"

type parserCase struct {
	Text     string   `json:"text"`
	Thinking bool     `json:"thinking"`
	Tools    bool     `json:"tools"`
	Chunks   []string `json:"chunks"`
}

type vllmSplit struct {
	Reasoning     *string `json:"reasoning"`
	Content       *string `json:"content"`
	Calls         []call  `json:"calls"`
	StreamContent string  `json:"stream_content"`
	StreamCalls   []call  `json:"stream_calls"`
}

type call struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

var parserCases = []parserCase{
	{Text: "<think>\nhmm\n</think>\n\nHello", Thinking: true},
	{Text: "no think tags at all", Thinking: true},
	{Text: "no think tags at all", Thinking: false},
	{Text: "<think>a</think>b</think>c", Thinking: true},
	{Text: "</think>only content", Thinking: false},
	{Text: "a <think> inside</think>rest", Thinking: true},
	{Text: "reason<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", Thinking: true, Tools: true},
	{Text: "<think>\nplan\n</think>\n\nOK.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>", Thinking: true, Tools: true},
	{Text: "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"n\": [1, 2.5, {\"x\": null}], \"t\": true}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n</tool_call>", Tools: true},
	{Text: "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }</tool_call>", Tools: true},
	{Text: "x<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}", Tools: true},
	{Text: "<tool_call>{\"name\":\"f\",\"arguments\":{\"q\":\"a\\\"b}\\n\"}}</tool_call> trailing", Tools: true},
	{Text: "just text <tool", Tools: true},
	{Text: "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"deep\": {\"k\": [\"<\", \"}\"]}}}\n</tool_call>", Tools: true},
	{Text: "tools offered, none called.", Tools: true},
}

// chunksOf splits s into pieces of n runes.
func chunksOf(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

func runVLLM(t *testing.T, cases []parserCase) []vllmSplit {
	t.Helper()
	if _, err := os.Stat(vllmPython); err != nil {
		t.Skipf("vLLM venv not installed (%v); this test runs vLLM 0.34.0's parsers", err)
	}
	added := map[string]int{}
	for _, a := range Qwen3AddedTokens {
		added[a.Text] = a.ID
	}
	ab, _ := json.Marshal(added)
	in, _ := json.Marshal(cases)
	cmd := exec.Command(vllmPython, "testdata/vllm_parsers.py", string(ab))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "vLLM parsers failed: %s", stderr.String())
	var res []vllmSplit
	require.NoError(t, json.Unmarshal(out, &res))
	require.Len(t, res, len(cases))
	return res
}

// TestAgainstVLLMParsers feeds the same texts to vLLM 0.34.0's qwen3
// reasoning parser and hermes tool parser (run in the installed venv) and to
// ours, and compares the split: reasoning, content, tool call names and
// arguments (ids are random on both sides), and, for streaming, the
// concatenated content and per-call argument text.
func TestAgainstVLLMParsers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts vLLM's Python (slow import)")
	}
	cases := append([]parserCase(nil), parserCases...)
	for i := range cases {
		if cases[i].Tools && !cases[i].Thinking {
			cases[i].Chunks = chunksOf(cases[i].Text, 3)
		}
	}
	want := runVLLM(t, cases)
	p := mustPipeline(t, Config{})
	for i, c := range cases {
		req := &Request{ChatTemplateKwargs: map[string]any{"enable_thinking": c.Thinking}}
		if c.Tools {
			req.Tools = []Tool{{Type: "function", Function: ToolFunction{Name: "get_weather"}}}
		}
		msg, err := p.Derender(req, p.Tokenize(c.Text))
		require.NoError(t, err)
		w := want[i]
		require.Equal(t, str(w.Reasoning), str(msg.Reasoning), "case %d %q: reasoning", i, c.Text)
		if len(w.Calls) == 0 && w.Content != nil && *w.Content == "" {
			w.Content = nil // vLLM's message drops empty content too
		}
		require.Equal(t, str(w.Content), str(msg.Content), "case %d %q: content", i, c.Text)
		var got []call
		for _, tc := range msg.ToolCalls {
			got = append(got, call{tc.Function.Name, tc.Function.Arguments})
			require.True(t, strings.HasPrefix(tc.ID, "chatcmpl-tool-") && len(tc.ID) == len("chatcmpl-tool-")+16, tc.ID)
		}
		require.Equal(t, w.Calls, nonNil(got), "case %d %q: tool calls", i, c.Text)

		if c.Chunks == nil {
			continue
		}
		s := p.NewStream(req)
		var content string
		calls := map[int]*call{}
		for _, ch := range c.Chunks {
			d, err := s.Next(p.Tokenize(ch))
			require.NoError(t, err)
			content += d.Content
			for _, tc := range d.ToolCalls {
				if calls[tc.Index] == nil {
					calls[tc.Index] = &call{}
				}
				calls[tc.Index].Name += tc.Function.Name
				calls[tc.Index].Arguments += tc.Function.Arguments
			}
		}
		var sc []call
		for j := 0; j < len(calls); j++ {
			sc = append(sc, *calls[j])
		}
		require.Equal(t, w.StreamContent, content, "case %d %q: streamed content", i, c.Text)
		require.Equal(t, w.StreamCalls, nonNil(sc), "case %d %q: streamed tool calls", i, c.Text)
	}
}

func nonNil(c []call) []call {
	if c == nil {
		return []call{}
	}
	return c
}

// str shows a *string as its value or <nil>, so failures print text.
func str(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return "\"" + *s + "\""
}
