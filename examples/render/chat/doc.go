// Package chat is the CPU side of a tokens-only serving stack: it turns an
// OpenAI chat request into prompt token ids (Render), and generated token ids
// back into an assistant message split into content, reasoning and tool calls
// (Derender), at once or chunk by chunk (Stream).
//
// A Pipeline holds a BPE tokenizer (cl100k_base from
// github.com/tiktoken-go/tokenizer, plus ChatML and Qwen3 added tokens), a
// Jinja chat template (a Qwen3-style template with tools is built in), a
// reasoning parser ("qwen3": <think>...</think>) and a tool-call parser
// ("hermes": <tool_call>{json}</tool_call>). The zero Config selects all of
// them. The parsers must match the engine's configuration, as vLLM's must:
// a different parser splits the same tokens differently.
//
// A Stream is incremental: a chunk costs work in proportion to its own
// tokens, not to the tokens before it, because the detokenizer carries its
// incomplete UTF-8 bytes and the parsers are state machines that carry their
// partial tags. Replay is the stateless alternative vLLM's streaming derender
// uses (re-derender the whole history, diff); it is here for tests and
// benchmarks. docs/render.md has the wire formats and the measurements.
package chat
