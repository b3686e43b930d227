"""JSON in `<tool_call>` tags (Hermes 2 Pro, Qwen2.5 / Qwen3 / Qwen3-Next, Granite 4, SmolLM3) - also swiftbox's
default tool format (data/dialect.py) that training renders for templates without tool calls of their own:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

InternLM2's `<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>` is the same idea with other tags.
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import ToolFormat, Tools, from_obj, loads
from swiftbox.serving.toolformats.sections import block_split, one_call

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def _json_call(body: str, tools: Tools) -> Optional[dict]:
    """A block holds one JSON call."""
    return from_obj(loads(body.strip()))


def _detect(template: str) -> bool:
    return OPEN in template


HERMES = ToolFormat("hermes", ("hermes",), (OPEN,), block_split(OPEN, CLOSE, one_call(_json_call)), _detect,
                    example='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')

I_OPEN, I_CLOSE = "<|action_start|><|plugin|>", "<|action_end|>"
INTERNLM = ToolFormat("internlm", ("internlm",), (I_OPEN,), block_split(I_OPEN, I_CLOSE, one_call(_json_call)),
                      lambda template: I_OPEN in template or "<|plugin|>" in template,
                      example='<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
                              "<|action_end|>")
