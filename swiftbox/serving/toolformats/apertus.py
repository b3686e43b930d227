"""Apertus's tool calls (vLLM's apertus): a JSON list of `{name: arguments}` objects between special tokens,

    <|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, ToolFormat, Tools, call, loads
from swiftbox.serving.toolformats.sections import block_split

OPEN, CLOSE = "<|tools_prefix|>", "<|tools_suffix|>"


def _calls(body: str, tools: Tools) -> Optional[list[dict]]:
    """A block holds a JSON list of `{name: arguments}` objects."""
    items = loads(body.strip())
    if items is MALFORMED or not isinstance(items, list):
        return None
    calls = []
    for item in items:
        if not (isinstance(item, dict) and len(item) == 1):
            return None
        (name, args), = item.items()
        found = call(name, args)
        if found is None:
            return None
        calls.append(found)
    return calls


APERTUS = ToolFormat("apertus", ("apertus",), (OPEN,), block_split(OPEN, CLOSE, _calls),
                     lambda template: OPEN in template,
                     example=f'{OPEN}[{{"get_weather": {{"city": "Paris"}}}}]{CLOSE}')
