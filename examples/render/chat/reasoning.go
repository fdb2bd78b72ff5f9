package chat

import "strings"

// Qwen3 reasoning markers.
const (
	thinkStart = "<think>"
	thinkEnd   = "</think>"
	toolStart  = "<tool_call>"
	toolEnd    = "</tool_call>"
)

// reasoningSplitter is the qwen3 reasoning parser as a state machine over
// text chunks, following vLLM 0.34.0's grammar (vllm/parser/qwen3.py):
// output starts in reasoning when thinking is enabled and in content
// otherwise; in reasoning, <think> is dropped, </think> ends reasoning, and
// <tool_call> ends it implicitly (the tag goes on to content, where the tool
// parser reads it); in content a repeated </think> is dropped. A suffix that
// may be the start of a marker is held until the next chunk decides it.
type reasoningSplitter struct {
	inReasoning bool
	held        string
}

// push returns the reasoning and content text the chunk decides.
func (r *reasoningSplitter) push(text string) (reasoning, content string) {
	s := r.held + text
	r.held = ""
	var rb, cb strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			r.emit(&rb, &cb, s)
			return rb.String(), cb.String()
		}
		r.emit(&rb, &cb, s[:i])
		s = s[i:]
		matched := false
		for _, tag := range r.tags() {
			if strings.HasPrefix(s, tag) {
				r.onTag(&cb, tag)
				s = s[len(tag):]
				matched = true
				break
			}
			if len(s) < len(tag) && strings.HasPrefix(tag, s) {
				r.held = s // could still become tag
				return rb.String(), cb.String()
			}
		}
		if !matched {
			r.emit(&rb, &cb, s[:1])
			s = s[1:]
		}
	}
	return rb.String(), cb.String()
}

func (r *reasoningSplitter) tags() []string {
	if r.inReasoning {
		return []string{thinkStart, thinkEnd, toolStart}
	}
	return []string{thinkEnd}
}

func (r *reasoningSplitter) onTag(content *strings.Builder, tag string) {
	switch {
	case r.inReasoning && tag == thinkEnd:
		r.inReasoning = false
	case r.inReasoning && tag == toolStart:
		r.inReasoning = false
		content.WriteString(tag)
	}
	// <think> inside reasoning and </think> inside content are dropped.
}

func (r *reasoningSplitter) emit(rb, cb *strings.Builder, s string) {
	if r.inReasoning {
		rb.WriteString(s)
	} else {
		cb.WriteString(s)
	}
}

// flush releases a held partial marker as plain text.
func (r *reasoningSplitter) flush() (reasoning, content string) {
	s := r.held
	r.held = ""
	if r.inReasoning {
		return s, ""
	}
	return "", s
}
