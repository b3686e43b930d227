"""Llama's JSON calls (vLLM's llama3_json / llama4_json): the answer is the call itself,

    {"name": "get_weather", "parameters": {"city": "Paris"}}                  Llama 3.1 / 3.2
    <|python_tag|>{"name": ...}                                               Llama 3.1 with code-interpreter tools
    <|python_start|><|python_end|>{"name": ...}                               Llama 4 (as its template renders it)

several calls are separated by `;`. Anything but calls in the answer makes it plain content.
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, from_obj, raw_decode

TAGS = ("<|python_tag|>", "<|python_start|>", "<|python_end|>")


def _split(text: str, tools: Tools) -> Optional[Split]:
    body = text.strip()
    at = 0
    while True:                     # past the leading tags, moving forward (no re-slicing: linear)
        while at < len(body) and body[at] in " \t\r\n":
            at += 1
        tag = next((t for t in TAGS if body.startswith(t, at)), None)
        if tag is None:
            break
        at += len(tag)
    body = body[at:].removesuffix("<|python_end|>").rstrip()
    calls = []
    at = 0
    while at < len(body):
        obj, end = raw_decode(body, at)
        found = from_obj(obj) if obj is not MALFORMED else None
        if found is None:
            return None
        calls.append(found)
        rest = body[end:].lstrip()
        if not rest:
            break
        if not rest.startswith(";"):
            return None
        at = len(body) - len(rest) + 1
    return ("", calls) if calls else None


LLAMA_JSON = ToolFormat("llama_json", ("llama3_json", "llama4_json"), ("<|python_start|>",), _split,
                        lambda template: "<|python_start|>" in template or (
                            "<|eot_id|>" in template and '"parameters"' in template),
                        leading=("{", "<|python_tag|>"),
                        example='{"name": "get_weather", "parameters": {"city": "Paris"}}')
