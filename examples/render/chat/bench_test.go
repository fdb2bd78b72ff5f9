package chat

import (
	"fmt"
	"strings"
	"testing"
)

// longRequest builds a chat whose rendered prompt is about n tokens.
func longRequest(p *Pipeline, n int) *Request {
	para := "The render tier turns chat requests into token ids and back, on CPU, so that engines see token ids only. "
	var b strings.Builder
	for len(p.Tokenize(b.String())) < n-40 {
		b.WriteString(para)
	}
	return &Request{Messages: []Turn{{Role: "system", Content: TextContent("Be brief.")}, {Role: "user", Content: TextContent(b.String())}},
		Tools: []Tool{{Type: "function", Function: ToolFunction{Name: "get_weather", Parameters: []byte(`{"type":"object"}`)}}}}
}

// BenchmarkRender9000: template plus BPE of a prompt of about 9,000 tokens
// (the guide's figure: about 15 ms).
func BenchmarkRender9000(b *testing.B) {
	p := mustPipeline(b, Config{})
	req := longRequest(p, 9000)
	ids, err := p.Render(req)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Render(req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ids)), "prompt-tokens")
}

// BenchmarkStreamDerender: the cost of one chunk (4 tokens) after 1k, 8k and
// 32k tokens of history, incremental (Stream) against vLLM's stateless
// replay (Replay). The history is reasoning then content, as a thinking
// model writes it.
func BenchmarkStreamDerender(b *testing.B) {
	p := mustPipeline(b, Config{MaxModelLen: 1 << 20})
	req := &Request{Tools: []Tool{{Type: "function", Function: ToolFunction{Name: "f"}}}}
	sentence := p.Tokenize("Tokens stream in small chunks from the engine, 東京 é, and each chunk is derendered. ")
	chunk := sentence[:4]
	for _, hist := range []int{1 << 10, 8 << 10, 32 << 10} {
		history := append(p.Tokenize("<think>\n"), []int{}...)
		for len(history) < hist/2 {
			history = append(history, sentence...)
		}
		history = append(history, p.Tokenize("\n</think>\n\n")...)
		for len(history) < hist {
			history = append(history, sentence...)
		}
		history = history[:hist]
		name := fmt.Sprintf("%dk", hist>>10)
		b.Run(name+"/incremental", func(b *testing.B) {
			s := p.NewStream(req)
			for i := 0; i < len(history); i += 4 {
				_, _ = s.Next(history[i:min(len(history), i+4)])
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Next(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/replay", func(b *testing.B) {
			// Each measured chunk replays the same history, in 4-token chunks.
			r := p.NewReplay(req)
			for i := 0; i < len(history); i += 4 {
				r.output = append(r.output, history[i:min(len(history), i+4)]...)
				r.lens = append(r.lens, min(4, len(history)-i))
			}
			out, lens := r.output, r.lens
			b.ResetTimer()
			for b.Loop() {
				r.output, r.lens = out, lens
				if _, err := r.Next(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
