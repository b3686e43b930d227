"""Kimi K2's tool-call section (vLLM's kimi_k2); the call id is the model's own `functions.NAME:INDEX`:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>         (one line)
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, call, loads

BEGIN, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL, ARGS, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def _one(body: str) -> Optional[dict]:
    ident, sep, rest = body.partition(ARGS)
    if not sep:
        return None
    ident = ident.strip()
    name = ident.rsplit(":", 1)[0] if ":" in ident else ident
    name = name.split(".", 1)[1] if name.startswith("functions.") else name
    args = loads(rest.strip())
    return call(name, args, call_id=ident) if args is not MALFORMED else None


def _split(text: str, tools: Tools) -> Optional[Split]:
    start = text.find(BEGIN)
    if start < 0:
        return None
    end = text.find(END, start)
    region = text[start + len(BEGIN):end if end >= 0 else len(text)]
    calls = []
    at = 0
    while (s := region.find(CALL, at)) >= 0:
        e = region.find(CALL_END, s)
        if e < 0:
            return None
        found = _one(region[s + len(CALL):e])
        if found is None:
            return None
        calls.append(found)
        at = e + len(CALL_END)
    after = text[end + len(END):] if end >= 0 else ""
    return (text[:start] + after, calls) if calls else None


KIMI_K2 = ToolFormat("kimi_k2", ("kimi_k2",), (BEGIN,), _split, lambda template: BEGIN in template,
                     example=f'{BEGIN}{CALL}functions.get_weather:0{ARGS}{{"city": "Paris"}}{CALL_END}{END}')
