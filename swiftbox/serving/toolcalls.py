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
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.DOTALL)


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


def _call(name: str, arguments) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {},
                                                                    ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": args}}


def _from_obj(obj) -> Optional[dict]:
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        return _call(obj["name"], obj.get("arguments", obj.get("parameters", {})))
    return None


def parse(text: str, fmt: str, *, think: bool = False, tool_names: Optional[set[str]] = None) -> Parsed:
    reasoning = None
    if think and "</think>" in text:
        match = THINK.match(text)
        if match:
            reasoning, text = match.group(1).strip(), text[match.end():]
    calls: list[dict] = []
    if fmt == "hermes":
        for body in HERMES.findall(text):
            try:
                call = _from_obj(json.loads(body))
            except json.JSONDecodeError:
                call = None
            if call is None:
                return Parsed(text.strip(), reasoning)        # malformed: leave the text as it is
            calls.append(call)
        if calls:
            text = HERMES.sub("", text)
    elif fmt == "mistral":
        at = text.find("[TOOL_CALLS]")
        head, body = (text[:at], text[at + len("[TOOL_CALLS]"):]) if at >= 0 else ("", text)
        if at >= 0 or body.lstrip().startswith("[{"):
            try:
                items = json.loads(body.strip())
                calls = [c for c in (_from_obj(i) for i in (items if isinstance(items, list) else [items])) if c]
            except json.JSONDecodeError:
                calls = []
            if calls:
                text = head
    elif fmt == "llama3_json":
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if body.startswith("{"):
            try:
                call = _from_obj(json.loads(body))
            except json.JSONDecodeError:
                call = None
            if call:
                calls, text = [call], ""
    elif fmt == "glm4" and tool_names:
        name, _, rest = text.strip().partition("\n")
        if name.strip() in tool_names:
            try:
                calls, text = [_call(name.strip(), json.loads(rest or "{}"))], ""
            except json.JSONDecodeError:
                pass
    if not calls and fmt not in ("hermes", "") and "<tool_call>" in text:
        return parse(text, "hermes", tool_names=tool_names)._replace_reasoning(reasoning)
    content = text.strip()
    return Parsed(content if content or not calls else None, reasoning, calls)
