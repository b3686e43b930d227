"""Apertus's tool calls (vLLM's apertus): a JSON list of `{name: arguments}` objects between special tokens,

    <|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, blocks, call, loads

OPEN, CLOSE = "<|tools_prefix|>", "<|tools_suffix|>"


def _split(text: str, tools: Tools) -> Optional[Split]:
    bodies, outside, _ = blocks(text, OPEN, CLOSE)
    calls = []
    for body in bodies:
        items = loads(body.strip())
        if items is MALFORMED or not isinstance(items, list):
            return None
        for item in items:
            if not (isinstance(item, dict) and len(item) == 1):
                return None
            (name, args), = item.items()
            found = call(name, args)
            if found is None:
                return None
            calls.append(found)
    return ("".join(outside), calls) if calls else None


APERTUS = ToolFormat("apertus", ("apertus",), (OPEN,), _split, lambda template: OPEN in template,
                     example=f'{OPEN}[{{"get_weather": {{"city": "Paris"}}}}]{CLOSE}')
