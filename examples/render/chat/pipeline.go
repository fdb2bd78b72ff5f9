package chat

import (
	"fmt"
)

// Parser names accepted by Config.
const (
	ReasoningQwen3 = "qwen3"  // <think>...</think>, vLLM's --reasoning-parser qwen3
	ToolHermes     = "hermes" // <tool_call>{json}</tool_call>, vLLM's --tool-call-parser hermes
	ParserNone     = "none"   // no parser: all output is content
)

// Config selects the tokenizer, template and parsers. The zero value works:
// cl100k_base with Qwen3AddedTokens, the built-in Qwen3-style template,
// reasoning parser "qwen3" and tool parser "hermes".
type Config struct {
	// Encoding is a tiktoken-go embedded encoding name; "" is cl100k_base.
	Encoding string
	// AddedTokens replace Qwen3AddedTokens when non-nil.
	AddedTokens []AddedToken
	// Template is a Jinja chat template's source; "" is Qwen3Template().
	Template string
	// ReasoningParser is "qwen3" (default when "") or "none".
	ReasoningParser string
	// ToolParser is "hermes" (default when "") or "none".
	ToolParser string
	// MaxModelLen bounds prompt plus output tokens, as vLLM's
	// --max-model-len; 0 is 32768.
	MaxModelLen int
}

// DefaultMaxModelLen is Config.MaxModelLen's default.
const DefaultMaxModelLen = 32768

// Pipeline renders and derenders. It is safe for concurrent use; a Stream
// is not (one per generation).
type Pipeline struct {
	tok         *Tokenizer
	tpl         *template
	reasoning   bool
	tools       bool
	maxModelLen int
}

// New builds a Pipeline.
func New(cfg Config) (*Pipeline, error) {
	enc := cfg.Encoding
	if enc == "" {
		enc = "cl100k_base"
	}
	added := cfg.AddedTokens
	if added == nil {
		added = Qwen3AddedTokens
	}
	tok, err := NewTokenizer(enc, added)
	if err != nil {
		return nil, err
	}
	src := cfg.Template
	if src == "" {
		src = qwen3Template
	}
	tpl, err := newTemplate(src)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{tok: tok, tpl: tpl, maxModelLen: cfg.MaxModelLen}
	if p.maxModelLen == 0 {
		p.maxModelLen = DefaultMaxModelLen
	}
	switch cfg.ReasoningParser {
	case "", ReasoningQwen3:
		p.reasoning = true
	case ParserNone:
	default:
		return nil, fmt.Errorf("chat: reasoning parser %q: want %q or %q", cfg.ReasoningParser, ReasoningQwen3, ParserNone)
	}
	switch cfg.ToolParser {
	case "", ToolHermes:
		p.tools = true
	case ParserNone:
	default:
		return nil, fmt.Errorf("chat: tool parser %q: want %q or %q", cfg.ToolParser, ToolHermes, ParserNone)
	}
	return p, nil
}

// Tokenizer returns the pipeline's tokenizer.
func (p *Pipeline) Tokenizer() *Tokenizer { return p.tok }

// HasParser says whether a reasoning or tool parser is configured; vLLM then
// requires chat_request on derender.
func (p *Pipeline) HasParser() bool { return p.reasoning || p.tools }

// MaxModelLen is the configured bound on prompt plus output tokens.
func (p *Pipeline) MaxModelLen() int { return p.maxModelLen }

// Tokenize encodes text (added tokens matched whole).
func (p *Pipeline) Tokenize(text string) []int { return p.tok.Encode(text) }

// Detokenize decodes ids, keeping special tokens; unknown ids are skipped
// (use Tokenizer().Decode for an error instead).
func (p *Pipeline) Detokenize(ids []int) string {
	valid := ids[:0:0]
	for _, id := range ids {
		if p.tok.Valid(id) {
			valid = append(valid, id)
		}
	}
	s, _ := p.tok.Decode(valid, false)
	return s
}

// RenderText applies the chat template and returns the prompt text.
func (p *Pipeline) RenderText(req *Request) (string, error) {
	return p.tpl.render(req)
}

// Render applies the chat template and tokenizes the prompt.
func (p *Pipeline) Render(req *Request) ([]int, error) {
	text, err := p.tpl.render(req)
	if err != nil {
		return nil, err
	}
	ids := p.tok.Encode(text)
	if len(ids) == 0 {
		return nil, badRequest("No token_ids rendered")
	}
	if len(ids) >= p.maxModelLen {
		return nil, badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", p.maxModelLen, len(ids))
	}
	return ids, nil
}

// Message is a derendered assistant message in vLLM's ChatMessage shape
// (role, content, reasoning, tool_calls).
type Message struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Reasoning *string    `json:"reasoning,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// HasReasoningParser says whether the reasoning parser is configured.
func (p *Pipeline) HasReasoningParser() bool { return p.reasoning }
