"""Gemma 4's tool calls (vLLM's gemma4): `<|tool_call>call:NAME{key:value,...}<tool_call|>`, values in Gemma's own
notation - strings between `<|"|>` quotes, numbers, true / false / null, `{...}` objects (keys bare or quoted) and
`[...]` lists:

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>

The template ends the model's turn with `<|tool_response>` after the calls (the tool's answer continues it).
"""
from __future__ import annotations

from typing import Any, Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, blocks, call, loads

OPEN, CLOSE, QUOTE, RESPONSE = "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>"
MAX_DEPTH = 64


class _Reader:
    """A recursive-descent reader of one value; MALFORMED on anything else (depth capped: never a RecursionError)."""

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def _skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
            self.at += 1

    def value(self, depth: int = 0) -> Any:
        self._skip()
        t, at = self.text, self.at
        if depth > MAX_DEPTH or at >= len(t):
            return MALFORMED
        if t.startswith(QUOTE, at):
            end = t.find(QUOTE, at + len(QUOTE))
            if end < 0:
                return MALFORMED
            self.at = end + len(QUOTE)
            return t[at + len(QUOTE):end]
        if t[at] == "{":
            return self._object(depth)
        if t[at] == "[":
            return self._list(depth)
        end = at
        while end < len(t) and t[end] not in ",}] \t\r\n":
            end += 1
        word = t[at:end]
        self.at = end
        found = loads(word) if word else MALFORMED
        return found if found is MALFORMED or not isinstance(found, (dict, list)) else MALFORMED

    def _object(self, depth: int) -> Any:
        self.at += 1
        out: dict[str, Any] = {}
        while True:
            self._skip()
            if self.text.startswith("}", self.at):
                self.at += 1
                return out
            if self.text.startswith(QUOTE, self.at):
                key = self.value(depth + 1)
            else:
                colon = self.text.find(":", self.at)
                key = self.text[self.at:colon].strip() if colon >= 0 else MALFORMED
                self.at = colon if colon >= 0 else self.at
            self._skip()
            if not isinstance(key, str) or not key or not self.text.startswith(":", self.at):
                return MALFORMED
            self.at += 1
            item = self.value(depth + 1)
            if item is MALFORMED:
                return MALFORMED
            out[key] = item
            self._skip()
            if self.text.startswith(",", self.at):
                self.at += 1
            elif not self.text.startswith("}", self.at):
                return MALFORMED

    def _list(self, depth: int) -> Any:
        self.at += 1
        out: list[Any] = []
        while True:
            self._skip()
            if self.text.startswith("]", self.at):
                self.at += 1
                return out
            item = self.value(depth + 1)
            if item is MALFORMED:
                return MALFORMED
            out.append(item)
            self._skip()
            if self.text.startswith(",", self.at):
                self.at += 1
            elif not self.text.startswith("]", self.at):
                return MALFORMED


def arguments(text: str) -> Any:
    """`{key:value,...}` in Gemma's notation -> a dict, or MALFORMED (also when anything follows it)."""
    reader = _Reader(text.strip())
    if not reader.text.startswith("{"):
        return MALFORMED
    found = reader.value()
    return found if found is not MALFORMED and reader.at == len(reader.text) else MALFORMED


def _one(body: str) -> Optional[dict]:
    body = body.strip()
    if not body.startswith("call:"):
        return None
    brace = body.find("{")
    if brace < 0:
        return None
    args = arguments(body[brace:])
    return call(body[len("call:"):brace], args) if args is not MALFORMED else None


def _split(text: str, tools: Tools) -> Optional[Split]:
    bodies, outside, _ = blocks(text, OPEN, CLOSE)
    calls = []
    for body in bodies:
        found = _one(body)
        if found is None:
            return None
        calls.append(found)
    rest = "".join(outside).replace(RESPONSE, "")
    return (rest, calls) if calls else None


GEMMA4 = ToolFormat("gemma4", ("gemma4",), (OPEN,), _split, lambda template: OPEN in template and "call:" in template,
                    example=f"{OPEN}call:get_weather{{city:{QUOTE}Paris{QUOTE}}}{CLOSE}")
