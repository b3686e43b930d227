"""Tool calls and reasoning in a model's answer, for the built-in engine (vLLM parses its own with the
`--tool-call-parser` / `--reasoning-parser` the preset names, see modeling/registry.py).

The format is read off the chat template the model was trained with, the same way it writes tool calls:
- hermes (Qwen2.5 / Qwen3 / InternLM-style): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (the marker may be decoded away)
- llama3_json (Llama 3.1 / 3.2): the whole answer is `{"name": ..., "parameters": {...}}`
- glm4: `function_name\\n{"arg": ...}` (the name must be one of the request's tools)
- any other template: hermes, swiftbox's default tool format (data/dialect.py) that training renders for templates
  without tool calls of their own; a native format that finds no call falls back to it too
Reasoning: templates that know `<think>` get `<think>...</think>` split off into `reasoning_content`
(also when the generation prompt already opened the block, as DeepSeek-R1's does).
Text that does not parse stays content: a model that writes a malformed call answers in plain text.

The parser is total and linear: it reads the model's output, which nobody controls, so every input ends as tool
calls or as plain content, never an exception (JSON nested past the recursion limit, a number past Python's
int-string limit, NaN/Infinity, lone surrogates: all "malformed"), and every scan is `str.find` moving forward
(no backtracking regex: `<tool_call>` followed by 2000 spaces used to take 11 s, thousands of unclosed tags
seconds; both blocked the event loop).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Optional

OPEN, CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
MALFORMED = object()   # what _loads returns for text that is not (usable) JSON


@dataclass
class Parsed:
    content: Optional[str]
    reasoning: Optional[str] = None
    tool_calls: list[dict] = field(default_factory=list)

    def _replace_reasoning(self, reasoning: Optional[str]) -> Parsed:
        return Parsed(self.content, reasoning, self.tool_calls)


def tool_format(chat_template: Optional[str]) -> str:
    """hermes | mistral | llama3_json | glm4 (hermes also for templates without tool calls of their own)."""
    t = chat_template or ""
    if "<tool_call>" in t:
        return "hermes"
    if "[TOOL_CALLS]" in t:
        return "mistral"
    if "<|eot_id|>" in t and '"parameters"' in t:
        return "llama3_json"
    if "[gMASK]" in t and "tools" in t:
        return "glm4"
    return "hermes"     # swiftbox's default tool format (data/dialect.py)


def thinks(chat_template: Optional[str]) -> bool:
    return "<think>" in (chat_template or "") or "</think>" in (chat_template or "")


def _loads(text: str):
    """JSON or MALFORMED, never an exception: bad syntax, nesting past the recursion limit, a number past the
    int-string limit (all ValueError or RecursionError)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return MALFORMED


def _call(name: str, arguments) -> Optional[dict]:
    """An OpenAI tool call, or None when it cannot be sent as JSON (NaN/Infinity, lone surrogates, too deep)."""
    try:
        args = arguments if isinstance(arguments, str) else json.dumps(
            arguments if arguments is not None else {}, ensure_ascii=False, allow_nan=False)
        name.encode("utf-8"), args.encode("utf-8")   # the response is UTF-8: a lone surrogate would fail it later
    except (ValueError, RecursionError):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": args}}


def _from_obj(obj) -> Optional[dict]:
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        return _call(obj["name"], obj.get("arguments", obj.get("parameters", {})))
    return None


def _hermes_blocks(text: str) -> tuple[list[str], str]:
    """The bodies of the closed `<tool_call>...</tool_call>` blocks (stripped) and the text around them, in one
    forward pass: once no `</tool_call>` follows an opening tag, none follows any later one either."""
    bodies: list[str] = []
    outside: list[str] = []
    at = 0
    while (start := text.find(OPEN, at)) >= 0 and (end := text.find(CLOSE, start + len(OPEN))) >= 0:
        outside.append(text[at:start])
        bodies.append(text[start + len(OPEN):end].strip())
        at = end + len(CLOSE)
    outside.append(text[at:])
    return bodies, "".join(outside)


def _split_reasoning(text: str) -> tuple[Optional[str], str]:
    """`[<think>]reasoning</think>answer` -> (reasoning, answer); text without `</think>` is all answer."""
    end = text.find(THINK_CLOSE)
    if end < 0:
        return None, text
    head = text[:end].lstrip()
    head = head[len(THINK_OPEN):] if head.startswith(THINK_OPEN) else head
    return head.strip(), text[end + len(THINK_CLOSE):].lstrip()


def parse(text: str, fmt: str, *, think: bool = False, tool_names: Optional[set[str]] = None) -> Parsed:
    reasoning = None
    if think:
        reasoning, text = _split_reasoning(text)
    calls: list[dict] = []
    if fmt == "hermes":
        bodies, outside = _hermes_blocks(text)
        for body in bodies:
            call = _from_obj(_loads(body))
            if call is None:
                return Parsed(text.strip(), reasoning)        # malformed: leave the text as it is
            calls.append(call)
        if calls:
            text = outside
    elif fmt == "mistral":
        at = text.find("[TOOL_CALLS]")
        head, body = (text[:at], text[at + len("[TOOL_CALLS]"):]) if at >= 0 else ("", text)
        if at >= 0 or body.lstrip().startswith("[{"):
            items = _loads(body.strip())
            if items is not MALFORMED:
                calls = [c for c in (_from_obj(i) for i in (items if isinstance(items, list) else [items])) if c]
            if calls:
                text = head
    elif fmt == "llama3_json":
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if body.startswith("{"):
            call = _from_obj(_loads(body))
            if call:
                calls, text = [call], ""
    elif fmt == "glm4" and tool_names:
        name, _, rest = text.strip().partition("\n")
        if name.strip() in tool_names:
            arguments = _loads(rest or "{}")
            call = _call(name.strip(), arguments) if arguments is not MALFORMED else None
            if call:
                calls, text = [call], ""
    if not calls and fmt not in ("hermes", "") and "<tool_call>" in text:
        return parse(text, "hermes", tool_names=tool_names)._replace_reasoning(reasoning)
    content = text.strip()
    return Parsed(content if content or not calls else None, reasoning, calls)
