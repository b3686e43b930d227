"""The record every tool-call format is (`ToolFormat`), the parsed answer (`Parsed`) and the helpers the formats
share: JSON that never raises, an OpenAI tool call built from a name and arguments, and argument values cast by the
tool's JSON schema.

A format's `split(text, tools)` reads the part of an answer from its first opener on (the stream parser hands it
over, see stream.py) and returns (the text outside the calls, the calls), or None when no valid call is there: the
text then stays content, as a model that writes a malformed call answers in plain text. Every split is total (the
model's output is nobody's to control: bad JSON, nesting past the recursion limit, huge numbers, NaN, lone
surrogates all end as "no call", never an exception) and linear (`str.find` moving forward, no backtracking regex).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

MALFORMED = object()   # what loads() returns for text that is not (usable) JSON
Tools = dict[str, dict]   # the request's tools: function name -> its parameters JSON schema ({} when none)
Split = tuple[str, list[dict]]


@dataclass
class Parsed:
    """An answer read back: its content (None when the answer is only tool calls), reasoning, OpenAI tool calls."""

    content: Optional[str]
    reasoning: Optional[str] = None
    tool_calls: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class ToolFormat:
    """One way a model writes tool calls. `name` is swiftbox's; `vllm` the vLLM `--tool-call-parser` names that
    read the same text; `openers` start a call anywhere in the answer, `leading` only at its very start;
    `dynamic_leading` (glm4) derives leading openers from the request's tool names; `detect` says whether a chat
    template writes this format."""

    name: str
    vllm: tuple[str, ...]
    openers: tuple[str, ...]
    split: Callable[[str, Tools], Optional[Split]]
    detect: Callable[[str], bool]
    leading: tuple[str, ...] = ()
    dynamic_leading: Optional[Callable[[Tools], tuple[str, ...]]] = None
    example: str = ""            # what a get_weather(city="Paris") call looks like in this format (docs, tests)

    def leading_for(self, tools: Tools) -> tuple[str, ...]:
        return self.leading + (self.dynamic_leading(tools) if self.dynamic_leading else ())


def loads(text: str) -> Any:
    """JSON or MALFORMED, never an exception: bad syntax, nesting past the recursion limit, a number past the
    int-string limit (all ValueError or RecursionError)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return MALFORMED


def raw_decode(text: str, at: int = 0) -> tuple[Any, int]:
    """The JSON value starting at `at` (after whitespace) and where it ends; (MALFORMED, at) when there is none."""
    n = len(text)
    while at < n and text[at] in " \t\r\n":
        at += 1
    try:
        return json.JSONDecoder().raw_decode(text, at)
    except (ValueError, RecursionError):
        return MALFORMED, at


def new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def call(name: str, arguments: Any, call_id: Optional[str] = None) -> Optional[dict]:
    """An OpenAI tool call, or None when it cannot be sent as JSON (NaN/Infinity, lone surrogates, too deep, arguments
    that are not an object)."""
    if not isinstance(name, str) or not name.strip():
        return None
    if isinstance(arguments, str):
        arguments = loads(arguments) if arguments.strip() else {}
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    try:
        args = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        name.encode("utf-8"), args.encode("utf-8")   # the response is UTF-8: a lone surrogate would fail it later
        if call_id is not None:
            call_id.encode("utf-8")
    except (ValueError, RecursionError):
        return None
    return {"id": call_id or new_id(), "type": "function", "function": {"name": name.strip(), "arguments": args}}


def from_obj(obj: Any) -> Optional[dict]:
    """{"name", "arguments" | "parameters"} -> a call (None when it is not one)."""
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        return call(obj["name"], obj.get("arguments", obj.get("parameters", {})))
    return None


def typed(value: str, schema: Optional[dict]) -> Any:
    """An argument written as text (XML / key-value formats) as the tool's schema types it: a string parameter keeps
    the text, any other (or an unknown one) takes the JSON value the text spells, else the text."""
    kind = (schema or {}).get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return value
    found = loads(value)
    return value if found is MALFORMED else found


def param_schema(tools: Tools, name: str, param: str) -> Optional[dict]:
    props = (tools.get(name) or {}).get("properties")
    found = props.get(param) if isinstance(props, dict) else None
    return found if isinstance(found, dict) else None


def blocks(text: str, open_: str, close: str) -> tuple[list[str], list[str], bool]:
    """The bodies of `open_ ... close` blocks in one forward pass, the text around them, and whether an opener was
    left unclosed (once no `close` follows an opener, none follows a later one either)."""
    bodies: list[str] = []
    outside: list[str] = []
    at = 0
    unclosed = False
    while (start := text.find(open_, at)) >= 0:
        end = text.find(close, start + len(open_))
        if end < 0:
            unclosed = True
            break
        outside.append(text[at:start])
        bodies.append(text[start + len(open_):end])
        at = end + len(close)
    outside.append(text[at:])
    return bodies, outside, unclosed
