"""Mistral's `[TOOL_CALLS]` (vLLM's mistral), both generations of it:

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]      Mistral 7B v0.3, Nemo (tokenizer v3)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}                             Small 3.2, Ministral 3 (v11+)
    [TOOL_CALLS]get_weather[CALL_ID]abc123xyz[ARGS]{"city": "Paris"}           (as templates render a call's id)

several calls repeat the marker. An answer that starts with `[{` is read as the first form too: the marker is a
special token some engines decode away.
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, call, from_obj, raw_decode

MARK, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def _segment(seg: str) -> Optional[tuple[list[dict], str]]:
    """One marker's calls and the text after them (None: not a call)."""
    if seg.lstrip().startswith("["):
        items, end = raw_decode(seg)
        if items is MALFORMED:
            return None
        calls = [from_obj(i) for i in (items if isinstance(items, list) else [items])]
        if not calls or None in calls:
            return None
        return [c for c in calls if c], seg[end:]
    at = seg.find(ARGS)
    if at < 0:
        return None
    name = seg[:at]
    name = name[:name.find(CALL_ID)] if CALL_ID in name else name
    args, end = raw_decode(seg, at + len(ARGS))
    found = call(name, args) if args is not MALFORMED else None
    return ([found], seg[end:]) if found else None


def _split(text: str, tools: Tools) -> Optional[Split]:
    head, marked, body = text.partition(MARK)
    segments = body.split(MARK) if marked else [text]
    if not marked:
        head = ""
    calls: list[dict] = []
    tail: list[str] = []
    for seg in segments:
        found = _segment(seg)
        if found is None:
            return None
        calls += found[0]
        tail.append(found[1])
    return (head + "".join(tail), calls) if calls else None


MISTRAL = ToolFormat("mistral", ("mistral",), (MARK,), _split, lambda template: MARK in template, leading=("[{",),
                     example='[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}')
