package chat

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/gonixl/gonixl/internal/pyjson"
)

// extractHermes is the one-shot Hermes tool-call parser, following vLLM
// 0.34.0's Hermes2ProToolParser.extract_tool_calls
// (vllm/tool_parsers/hermes_tool_parser.py): without <tool_call> everything
// is content; otherwise content is the text before the first <tool_call>
// ("" becomes null), each <tool_call>...</tool_call> (or the unclosed last
// one) holds a JSON object {"name", "arguments"}, and arguments are
// re-serialized as Python's json.dumps(ensure_ascii=False) writes them. If
// any call fails to parse, nothing is a tool call and all text is content.
func extractHermes(text string) (content *string, calls []ToolCall) {
	first := strings.Index(text, toolStart)
	if first < 0 {
		return &text, nil
	}
	rest := text[first:]
	for len(rest) > 0 {
		i := strings.Index(rest, toolStart)
		if i < 0 {
			break
		}
		body := rest[i+len(toolStart):]
		j := strings.Index(body, toolEnd)
		if j >= 0 {
			rest = body[j+len(toolEnd):]
			body = body[:j]
		} else {
			rest = ""
		}
		call, err := parseHermesCall(body)
		if err != nil {
			return &text, nil
		}
		calls = append(calls, call)
	}
	if first > 0 {
		c := text[:first]
		content = &c
	}
	return content, calls
}

func parseHermesCall(body string) (ToolCall, error) {
	var obj struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&obj); err != nil {
		return ToolCall{}, err
	}
	if _, err := dec.Token(); err != io.EOF { // Python's json.loads rejects trailing data
		return ToolCall{}, fmt.Errorf("trailing data after the tool call object")
	}
	if obj.Name == nil || obj.Arguments == nil {
		return ToolCall{}, fmt.Errorf("tool call lacks name or arguments")
	}
	args, err := pythonJSON(obj.Arguments)
	if err != nil {
		return ToolCall{}, err
	}
	return ToolCall{ID: newToolCallID(), Type: "function", Function: FunctionCall{Name: *obj.Name, Arguments: args}}, nil
}

// newToolCallID makes vLLM's random tool call id, "chatcmpl-tool-" and 16 hex
// digits (make_tool_call_id in vllm/renderers/chat_utils/tool_call.py@0.34.0;
// observed by running it).
func newToolCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

// pythonJSON re-writes a JSON value as Python's json.dumps(v,
// ensure_ascii=False) does: ", " and ": " separators, key order kept,
// non-ASCII kept, control characters escaped.
func pythonJSON(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	type frame struct {
		object bool
		n      int
	}
	var stack []frame
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return b.String(), nil
		}
		if err != nil {
			return "", err
		}
		if d, ok := t.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			b.WriteByte(byte(d))
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && top.n%2 == 1:
				b.WriteString(": ")
			case top.n > 0:
				b.WriteString(", ")
			}
			top.n++
		}
		switch v := t.(type) {
		case json.Delim:
			b.WriteByte(byte(v))
			stack = append(stack, frame{object: v == '{'})
		case string:
			pyjson.WriteString(&b, v, false)
		case json.Number:
			b.WriteString(v.String())
		case bool:
			if v {
				b.WriteString("true")
			} else {
				b.WriteString("false")
			}
		case nil:
			b.WriteString("null")
		}
	}
}

var hermesNameRE = regexp.MustCompile(`"name"\s*:\s*"([^"]+)"`)
var hermesArgsRE = regexp.MustCompile(`"arguments"\s*:\s*`)

// hermesStream is the streaming Hermes parser as a state machine. It emits
// what vLLM's extract_tool_calls_streaming emits over the same text (content
// before the first <tool_call>, then per call a header delta with id and
// name and argument text deltas), but reads each byte once: the JSON body of
// the open call is scanned incrementally for its nesting depth, so a chunk
// costs its own length (and, until a call's name appears, that call's
// prefix).
type hermesStream struct {
	started bool   // a <tool_call> was seen: no more content, as in vLLM
	held    string // possible partial <tool_call> before the first call
	inCall  bool
	index   int // index of the open call (or the next one)
	call    hermesCall
	after   string // text after a closed call, searched for the next <tool_call>
}

type hermesCall struct {
	body     []byte
	named    bool
	argsFrom int // offset of the arguments value in body; -1 until found
	argsSent int // offset in body up to which arguments were sent
	scanned  int // bytes of body scanned for depth
	depth    int
	inString bool
	escaped  bool
	closedAt int // offset of the '}' closing the outer object; -1 while open
}

func (h *hermesStream) push(text string, d *Delta) {
	if !h.started {
		s := h.held + text
		h.held = ""
		if i := strings.Index(s, toolStart); i >= 0 {
			d.Content += s[:i]
			h.started = true
			h.openCall()
			h.feedCall(s[i+len(toolStart):], d)
			return
		}
		keep := partialSuffix(s, toolStart)
		d.Content += s[:len(s)-keep]
		h.held = s[len(s)-keep:]
		return
	}
	if h.inCall {
		h.feedCall(text, d)
		return
	}
	h.feedBetween(text, d)
}

func (h *hermesStream) openCall() {
	h.inCall = true
	h.call = hermesCall{argsFrom: -1, closedAt: -1}
}

// feedBetween looks for the next <tool_call> in text after a closed call;
// that text itself is never sent (vLLM sends no content after the first call).
func (h *hermesStream) feedBetween(text string, d *Delta) {
	s := h.after + text
	if i := strings.Index(s, toolStart); i >= 0 {
		h.after = ""
		h.index++
		h.openCall()
		h.feedCall(s[i+len(toolStart):], d)
		return
	}
	keep := partialSuffix(s, toolStart)
	h.after = s[len(s)-keep:]
}

func (h *hermesStream) feedCall(text string, d *Delta) {
	c := &h.call
	c.body = append(c.body, text...)
	end := bytes.Index(c.body[max(0, len(c.body)-len(text)-len(toolEnd)):], []byte(toolEnd))
	if end >= 0 {
		end += max(0, len(c.body)-len(text)-len(toolEnd))
	}
	limit := len(c.body)
	if end >= 0 {
		limit = end
	}
	h.scan(limit)
	h.emit(limit, end >= 0, d)
	if end >= 0 {
		rest := string(c.body[end+len(toolEnd):])
		h.inCall = false
		h.call = hermesCall{}
		h.after = ""
		h.feedBetween(rest, d)
	}
}

// scan advances the depth scanner over body[:limit].
func (h *hermesStream) scan(limit int) {
	c := &h.call
	for ; c.scanned < limit && c.closedAt < 0; c.scanned++ {
		b := c.body[c.scanned]
		switch {
		case c.inString:
			switch {
			case c.escaped:
				c.escaped = false
			case b == '\\':
				c.escaped = true
			case b == '"':
				c.inString = false
			}
		case b == '"':
			c.inString = true
		case b == '{' || b == '[':
			c.depth++
		case b == '}' || b == ']':
			c.depth--
			if c.depth == 0 {
				c.closedAt = c.scanned
			}
		}
	}
}

func (h *hermesStream) emit(limit int, closed bool, d *Delta) {
	c := &h.call
	if !c.named {
		m := hermesNameRE.FindSubmatch(c.body[:limit])
		if m == nil {
			return
		}
		c.named = true
		d.ToolCalls = append(d.ToolCalls, DeltaToolCall{Index: h.index, ID: newToolCallID(), Type: "function",
			Function: &DeltaFunction{Name: string(m[1])}})
	}
	if c.argsFrom < 0 {
		loc := hermesArgsRE.FindIndex(c.body[:limit])
		if loc == nil {
			return
		}
		from := loc[1]
		for from < limit && isJSONSpace(c.body[from]) {
			from++
		}
		if from == limit {
			return // the blanks after the colon may go on: vLLM's \s* takes them all
		}
		c.argsFrom = from
		c.argsSent = from
	}
	stop := limit
	if c.closedAt >= 0 && c.closedAt < stop {
		stop = c.closedAt // the outer object's '}' is not part of the arguments
	} else if !closed {
		stop -= partialSuffixBytes(c.body[:limit], toolEnd)
	}
	for stop > c.argsSent && isJSONSpace(c.body[stop-1]) {
		stop-- // vLLM strips the body: trailing blanks wait for what follows
	}
	for stop > c.argsSent && !utf8.Valid(c.body[c.argsSent:stop]) && !utf8.FullRune(c.body[stop-1:stop]) {
		stop--
	}
	if stop > c.argsSent {
		d.ToolCalls = append(d.ToolCalls, DeltaToolCall{Index: h.index, Function: &DeltaFunction{Arguments: string(c.body[c.argsSent:stop])}})
		c.argsSent = stop
	}
}

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

func partialSuffixBytes(b []byte, tag string) int {
	for n := min(len(b), len(tag)-1); n > 0; n-- {
		if bytes.HasSuffix(b, []byte(tag[:n])) {
			return n
		}
	}
	return 0
}
