"""JSON in `<tool_call>` tags (Hermes 2 Pro, Qwen2.5 / Qwen3 / Qwen3-Next, Granite 4, SmolLM3) - also swiftbox's
default tool format (data/dialect.py) that training renders for templates without tool calls of their own:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

InternLM2's `<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>` is the same idea with other tags.
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import Split, ToolFormat, Tools, blocks, from_obj, loads

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def split_tagged(text: str, open_: str, close: str) -> Optional[Split]:
    """Every closed block must hold one JSON call (else: no calls at all, the text stays as it is)."""
    bodies, outside, _unclosed = blocks(text, open_, close)
    calls = []
    for body in bodies:
        found = from_obj(loads(body.strip()))
        if found is None:
            return None
        calls.append(found)
    return ("".join(outside), calls) if calls else None


def _split(text: str, tools: Tools) -> Optional[Split]:
    return split_tagged(text, OPEN, CLOSE)


def _detect(template: str) -> bool:
    return OPEN in template


HERMES = ToolFormat("hermes", ("hermes",), (OPEN,), _split, _detect,
                    example='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')

I_OPEN, I_CLOSE = "<|action_start|><|plugin|>", "<|action_end|>"
INTERNLM = ToolFormat("internlm", ("internlm",), (I_OPEN,), lambda text, tools: split_tagged(text, I_OPEN, I_CLOSE),
                      lambda template: I_OPEN in template or "<|plugin|>" in template,
                      example='<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
                              "<|action_end|>")
