# Runs vLLM 0.34.0's qwen3 reasoning parser and hermes tool parser over the
# cases on stdin (JSON list of {"text", "thinking", "tools", "chunks"}) and
# prints their split as JSON. Used by TestAgainstVLLMParsers.
import json, sys, logging
logging.disable(logging.CRITICAL)
from vllm.reasoning.qwen3_engine_reasoning_parser import Qwen3ParserReasoningAdapter
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

ADDED = json.loads(sys.argv[1])

class Tok:
    """The parsers read only the vocabulary of added tokens."""
    def get_vocab(self): return dict(ADDED)
    vocab = property(lambda self: dict(ADDED))
    all_special_tokens = []
    all_special_ids = []
    def encode(self, s, add_special_tokens=False): return []
    def decode(self, ids, skip_special_tokens=False): return ""
    def convert_ids_to_tokens(self, ids, skip_special_tokens=False): return []

tok = Tok()
out = []
for case in json.load(sys.stdin):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}] if case["tools"] else None
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools,
                                chat_template_kwargs={"enable_thinking": case["thinking"]})
    # --reasoning-parser qwen3 is this adapter (vllm/reasoning/__init__.py)
    rp = Qwen3ParserReasoningAdapter(tok, chat_template_kwargs={"enable_thinking": case["thinking"]})
    reasoning, content = rp.extract_reasoning(case["text"], req)
    calls = []
    if tools:
        info = Hermes2ProToolParser(tok).extract_tool_calls(content or "", req)
        if info.tools_called:
            content = info.content
            calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in info.tool_calls]
    # Hermes streaming over the content, in the given chunks: concatenated
    # content and per-call name and argument text.
    s_content, s_calls = "", {}
    if tools and case["chunks"]:
        hp = Hermes2ProToolParser(tok)
        prev = ""
        for ch in case["chunks"]:
            cur = prev + ch
            d = hp.extract_tool_calls_streaming(prev, cur, ch, [], [], [], req)
            prev = cur
            if d is None:
                continue
            s_content += d.content or ""
            for tc in d.tool_calls:
                e = s_calls.setdefault(tc.index, {"name": "", "arguments": ""})
                f = tc.function or {}
                if not isinstance(f, dict):
                    f = f.model_dump(exclude_none=True)
                e["name"] += f.get("name") or ""
                e["arguments"] += f.get("arguments") or ""
    out.append({"reasoning": reasoning, "content": content, "calls": calls,
                "stream_content": s_content, "stream_calls": [s_calls[i] for i in sorted(s_calls)]})
json.dump(out, sys.stdout)
