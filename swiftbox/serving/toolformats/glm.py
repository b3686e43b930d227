"""GLM's tool calls:

    get_weather\\n{"city": "Paris"}                                    GLM-4 (glm-4-9b-chat): the answer starts with
                                                                      one of the request's tool names
    <tool_call>get_weather\\n<arg_key>city</arg_key>\\n<arg_value>Paris</arg_value>\\n</tool_call>
                                                                      GLM-4.5 / 4.6 (vLLM's glm45)

GLM-4.5's values are text typed by the tool's schema (a string parameter keeps the text, others the JSON it spells).
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import (
    MALFORMED,
    Split,
    ToolFormat,
    Tools,
    blocks,
    call,
    loads,
    param_schema,
    typed,
)
from swiftbox.serving.toolformats.hermes import CLOSE, OPEN

KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


def _glm4(text: str, tools: Tools) -> Optional[Split]:
    name, _, rest = text.strip().partition("\n")
    if name.strip() not in tools:
        return None
    arguments = loads(rest.strip() or "{}")
    found = call(name.strip(), arguments) if arguments is not MALFORMED else None
    return ("", [found]) if found else None


GLM4 = ToolFormat("glm4", (), (), _glm4, lambda template: "[gMASK]" in template and "tools" in template,
                  dynamic_leading=lambda tools: tuple(f"{name}\n" for name in tools),
                  example='get_weather\n{"city": "Paris"}')


def _glm45_one(body: str, tools: Tools) -> Optional[dict]:
    first = body.find(KEY)
    name = (body if first < 0 else body[:first]).strip()
    args = {}
    at = max(first, 0)
    while first >= 0 and (start := body.find(KEY, at)) >= 0:
        key_end = body.find(KEY_END, start)
        v_start = body.find(VALUE, key_end) if key_end >= 0 else -1
        v_end = body.find(VALUE_END, v_start) if v_start >= 0 else -1
        if v_end < 0:
            return None
        key = body[start + len(KEY):key_end].strip()
        args[key] = typed(body[v_start + len(VALUE):v_end], param_schema(tools, name, key))
        at = v_end + len(VALUE_END)
    return call(name, args) if "\n" not in name and "{" not in name else None


def _glm45(text: str, tools: Tools) -> Optional[Split]:
    bodies, outside, _ = blocks(text, OPEN, CLOSE)
    calls = []
    for body in bodies:
        found = _glm45_one(body, tools)
        if found is None:
            return None
        calls.append(found)
    return ("".join(outside), calls) if calls else None


GLM45 = ToolFormat("glm45", ("glm45",), (OPEN,), _glm45, lambda template: KEY in template and OPEN in template,
                   example="<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>")
