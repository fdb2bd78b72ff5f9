package chat

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func collect(t testing.TB, next func([]int) (Delta, error), tokens []int, sizes []int) (Delta, error) {
	var all Delta
	for i, k := 0, 0; i < len(tokens); k++ {
		n := 1
		if len(sizes) > 0 {
			n = max(1, sizes[k%len(sizes)])
		}
		j := min(len(tokens), i+n)
		d, err := next(tokens[i:j])
		if err != nil {
			return all, err
		}
		all.Content += d.Content
		all.Reasoning += d.Reasoning
		for _, tc := range d.ToolCalls {
			tc.ID = ""
			all.ToolCalls = append(all.ToolCalls, tc)
		}
		i = j
	}
	return all, nil
}

// TestStreamEqualsDerender: for any chunking, the streamed reasoning and
// content add up to the one-shot derender's (no tools), and the streamed
// text is the same whether each chunk is one token or many.
func TestStreamEqualsDerender(t *testing.T) {
	p := mustPipeline(t, Config{})
	for _, c := range parserCases {
		if c.Tools {
			continue
		}
		req := &Request{ChatTemplateKwargs: map[string]any{"enable_thinking": c.Thinking}}
		ids := p.Tokenize(c.Text + " 東京 é")
		want, err := p.Derender(req, ids)
		require.NoError(t, err)
		for _, sizes := range [][]int{{1}, {2, 3}, {100}} {
			s := p.NewStream(req)
			got, err := collect(t, s.Next, ids, sizes)
			require.NoError(t, err)
			f := s.Finish()
			got.Content += f.Content
			got.Reasoning += f.Reasoning
			if c.Thinking {
				require.Equal(t, deref(want.Reasoning), got.Reasoning, c.Text)
				require.Equal(t, deref(want.Content), got.Content, c.Text)
			} else {
				// One-shot derender keeps a stray </think> without thinking (vLLM's
				// Qwen3Parser.extract_reasoning); the streaming grammar drops it.
				require.Equal(t, deref(want.Content), stray(c.Text)+got.Content, c.Text)
			}
		}
	}
}

func stray(text string) string {
	if len(text) >= 8 && text[:8] == "</think>" {
		return "</think>"
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestReplayEqualsStream: vLLM's stateless replay and our incremental stream
// give the same deltas chunk by chunk.
func TestReplayEqualsStream(t *testing.T) {
	p := mustPipeline(t, Config{})
	req := &Request{Tools: []Tool{{Type: "function", Function: ToolFunction{Name: "get_weather"}}}}
	ids := p.Tokenize("<think>\nplan é\n</think>\n\nOK.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>")
	s, r := p.NewStream(req), p.NewReplay(req)
	for i := 0; i < len(ids); i += 3 {
		j := min(i+3, len(ids))
		ds, err := s.Next(ids[i:j])
		require.NoError(t, err)
		dr, err := r.Next(ids[i:j])
		require.NoError(t, err)
		for k := range ds.ToolCalls {
			ds.ToolCalls[k].ID, dr.ToolCalls[k].ID = "", ""
		}
		require.Equal(t, ds, dr)
	}
}

func TestStreamRejectsUnknownTokenWithoutChange(t *testing.T) {
	p := mustPipeline(t, Config{})
	s := p.NewStream(&Request{})
	_, err := s.Next([]int{p.Tokenize("a")[0], 1 << 30})
	require.EqualError(t, err, "token id 1073741824 is outside the vocabulary (size 100285)")
	d, err := s.Next(p.Tokenize("b"))
	require.NoError(t, err)
	require.Equal(t, "b", d.Reasoning) // the rejected chunk's "a" did not stay behind
}

// FuzzStream feeds arbitrary token ids (from network bytes) in arbitrary
// chunks: no panic, Next errors only for ids outside the vocabulary, and the
// replayed stream says the same.
func FuzzStream(f *testing.F) {
	p := mustPipeline(f, Config{})
	for _, c := range parserCases {
		var b []byte
		for _, id := range p.Tokenize(c.Text) {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
		f.Add(b, uint8(3), c.Thinking)
	}
	req := func(thinking bool) *Request {
		return &Request{ChatTemplateKwargs: map[string]any{"enable_thinking": thinking},
			Tools: []Tool{{Type: "function", Function: ToolFunction{Name: "f"}}}}
	}
	f.Fuzz(func(t *testing.T, b []byte, chunk uint8, thinking bool) {
		var ids []int
		for len(b) >= 4 {
			ids = append(ids, int(binary.LittleEndian.Uint32(b)%uint32(p.Tokenizer().VocabSize()+10)))
			b = b[4:]
		}
		n := max(1, int(chunk%8))
		s, r := p.NewStream(req(thinking)), p.NewReplay(req(thinking))
		for i := 0; i < len(ids); i += n {
			part := ids[i:min(len(ids), i+n)]
			ds, errS := s.Next(part)
			dr, errR := r.Next(part)
			require.Equal(t, errS == nil, errR == nil)
			if errS != nil {
				return
			}
			for k := range ds.ToolCalls {
				ds.ToolCalls[k].ID, dr.ToolCalls[k].ID = "", ""
			}
			require.Equal(t, ds, dr)
		}
		s.Finish()
		_, err := p.Derender(req(thinking), ids)
		_ = err
	})
}

// FuzzRequestJSON: any bytes decode to an error or a Request that renders
// or fails with an error; known and unknown fields survive a round trip.
func FuzzRequestJSON(f *testing.F) {
	p := mustPipeline(f, Config{})
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"x":1}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":[{"type":"text","text":"r"}]}],"stop":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if json.Unmarshal(b, &r) != nil {
			return
		}
		_, _ = p.Render(&r)
		out, err := json.Marshal(r)
		require.NoError(t, err)
		var back Request
		require.NoError(t, json.Unmarshal(out, &back))
		require.Equal(t, len(r.Extra), len(back.Extra))
	})
}
