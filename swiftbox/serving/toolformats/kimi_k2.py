"""Kimi K2's tool-call section (vLLM's kimi_k2); the call id is the model's own `functions.NAME:INDEX`:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>         (one line)
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, ToolFormat, call, loads
from swiftbox.serving.toolformats.sections import section_split

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


KIMI_K2 = ToolFormat("kimi_k2", ("kimi_k2",), (BEGIN,), section_split(BEGIN, END, CALL, CALL_END, _one),
                     lambda template: BEGIN in template,
                     example=f'{BEGIN}{CALL}functions.get_weather:0{ARGS}{{"city": "Paris"}}{CALL_END}{END}')
