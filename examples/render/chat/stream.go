package chat

// Delta is one streamed piece of the assistant message, in vLLM's
// DeltaMessage shape (content, reasoning, tool_calls); empty strings are
// absent.
type Delta struct {
	Content   string          `json:"content,omitempty"`
	Reasoning string          `json:"reasoning,omitempty"`
	ToolCalls []DeltaToolCall `json:"tool_calls,omitempty"`
}

// Empty says whether the delta carries nothing.
func (d *Delta) Empty() bool {
	return d.Content == "" && d.Reasoning == "" && len(d.ToolCalls) == 0
}

// DeltaToolCall is a piece of a tool call: the first for an index carries id,
// type and name; later ones carry argument text.
type DeltaToolCall struct {
	Index    int            `json:"index"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function *DeltaFunction `json:"function,omitempty"`
}

// DeltaFunction is the function part of a DeltaToolCall.
type DeltaFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// Stream derenders one generation chunk by chunk. Each Next costs work in
// proportion to its tokens. Not safe for concurrent use.
type Stream struct {
	p         *Pipeline
	detok     detokenizer
	reasoning *reasoningSplitter
	tools     *hermesStream
	include   bool // include_reasoning
	outputLen int
	toolsSent bool
	finished  bool
	maxLen    int
}

// NewStream starts a stream for req. The reasoning parser starts in
// reasoning when req enables thinking (the default), as vLLM's qwen3 parser
// does.
func (p *Pipeline) NewStream(req *Request) *Stream {
	s := &Stream{p: p, detok: detokenizer{tok: p.tok, skipSpecial: req.skipSpecial()}, include: true, maxLen: p.maxModelLen}
	if req.IncludeReasoning != nil {
		s.include = *req.IncludeReasoning
	}
	if p.reasoning {
		s.reasoning = &reasoningSplitter{inReasoning: req.EnableThinking()}
	}
	if p.tools && req.toolsActive() {
		s.tools = &hermesStream{}
	}
	return s
}

// Next feeds the tokens generated since the last call and returns what they
// add to the message. An unknown token id is an error and changes nothing.
func (s *Stream) Next(newTokens []int) (Delta, error) {
	var d Delta
	if s.finished {
		return d, badRequest("stream already finished")
	}
	if s.outputLen+len(newTokens) > s.maxLen {
		return d, badRequest("output token_ids length (%d) exceeds max_model_len (%d).", s.outputLen+len(newTokens), s.maxLen)
	}
	text, err := s.detok.next(newTokens)
	if err != nil {
		return d, err
	}
	s.outputLen += len(newTokens)
	s.route(text, &d, false)
	return d, nil
}

// Finish ends the stream, releasing text held back for a possible marker or
// an incomplete character.
func (s *Stream) Finish() Delta {
	var d Delta
	if s.finished {
		return d
	}
	s.finished = true
	s.route(s.detok.flush(), &d, true)
	return d
}

// ToolsStreamed says whether a tool call was sent (vLLM then reports
// finish_reason "tool_calls").
func (s *Stream) ToolsStreamed() bool { return s.toolsSent }

func (s *Stream) route(text string, d *Delta, final bool) {
	content := text
	if s.reasoning != nil {
		r, c := s.reasoning.push(text)
		if final {
			r2, c2 := s.reasoning.flush()
			r, c = r+r2, c+c2
		}
		if s.include {
			d.Reasoning += r
		}
		content = c
	}
	if s.tools == nil {
		d.Content += content
		return
	}
	s.tools.push(content, d)
	if final && !s.tools.started {
		d.Content += s.tools.held
		s.tools.held = ""
	}
	if len(d.ToolCalls) > 0 {
		s.toolsSent = true
	}
}

// Replay derenders a stream the stateless way vLLM 0.34.0's streaming
// derender does (OnlineDerenderer._derender_chat_stream_parsed): for every
// chunk it builds fresh parsers, replays all earlier chunks through them
// with their original boundaries, discards that output, and returns what the
// new chunk adds. Its cost per chunk grows with the history; it exists to
// measure that against Stream.
type Replay struct {
	p      *Pipeline
	req    *Request
	output []int
	lens   []int
}

// NewReplay starts a replaying stream for req.
func (p *Pipeline) NewReplay(req *Request) *Replay { return &Replay{p: p, req: req} }

// Next replays the history and returns the delta of newTokens.
func (r *Replay) Next(newTokens []int) (Delta, error) {
	s := r.p.NewStream(r.req)
	off := 0
	for _, n := range r.lens {
		if _, err := s.Next(r.output[off : off+n]); err != nil {
			return Delta{}, err
		}
		off += n
	}
	d, err := s.Next(newTokens)
	if err != nil {
		return Delta{}, err
	}
	if len(newTokens) > 0 {
		r.output = append(r.output, newTokens...)
		r.lens = append(r.lens, len(newTokens))
	}
	return d, nil
}

// Derender turns a whole generation into the assistant message, as vLLM's
// non-streaming derender does: reasoning split first (vllm/parser/qwen3.py),
// then Hermes tool calls from the content (extract_tool_calls); content is
// null when empty.
func (p *Pipeline) Derender(req *Request, tokens []int) (Message, error) {
	msg := Message{Role: "assistant"}
	if len(tokens) > p.maxModelLen {
		return msg, badRequest("token_ids length (%d) exceeds max_model_len (%d).", len(tokens), p.maxModelLen)
	}
	d := detokenizer{tok: p.tok, skipSpecial: req.skipSpecial()}
	text, err := d.next(tokens)
	if err != nil {
		return msg, err
	}
	text += d.flush()
	content := text
	if p.reasoning && req.EnableThinking() { // vLLM's Qwen3Parser.extract_reasoning leaves the text alone without thinking
		rs := reasoningSplitter{inReasoning: req.EnableThinking()}
		r, c := rs.push(text)
		r2, c2 := rs.flush()
		r, content = r+r2, c+c2
		include := req.IncludeReasoning == nil || *req.IncludeReasoning
		if include {
			msg.Reasoning = &r
		}
	}
	if p.tools && req.toolsActive() {
		c, calls := extractHermes(content)
		msg.Content, msg.ToolCalls = c, calls
	} else if content != "" {
		msg.Content = &content
	}
	return msg, nil
}
