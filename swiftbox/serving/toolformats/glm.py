"""GLM's tool calls:

    get_weather\\n{"city": "Paris"}                                    GLM-4 (glm-4-9b-chat): the answer starts with
                                                                      one of the request's tool names
    <tool_call>get_weather\\n<arg_key>city</arg_key>\\n<arg_value>Paris</arg_value>\\n</tool_call>
                                                                      GLM-4.5 / 4.6 (vLLM's glm45)

GLM-4.7 (vLLM's glm47) writes the same without newlines. Hunyuan 3 (vLLM's hy_v3) uses the same key/value scheme
with `:opensource` tags and `<tool_sep:opensource>` after the name, inside a `<tool_calls:opensource>` section.
The values are text typed by the tool's schema (a string parameter keeps the text, others the JSON it spells).
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, call, loads, param_schema, typed
from swiftbox.serving.toolformats.hermes import CLOSE, OPEN
from swiftbox.serving.toolformats.sections import SplitFn, block_split, one_call

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


def key_values(body: str, tools: Tools, tags: tuple[str, str, str, str], sep: str = "") -> Optional[dict]:
    """`NAME[sep]<k>key</k><v>value</v>...` -> a call (tags: key open/close, value open/close)."""
    key, key_end, value, value_end = tags
    first = body.find(key)
    head = body if first < 0 else body[:first]
    name = (head.split(sep, 1)[0] if sep else head).strip()
    args = {}
    at = max(first, 0)
    while first >= 0 and (start := body.find(key, at)) >= 0:
        k_end = body.find(key_end, start)
        v_start = body.find(value, k_end) if k_end >= 0 else -1
        v_end = body.find(value_end, v_start) if v_start >= 0 else -1
        if v_end < 0:
            return None
        name_of_arg = body[start + len(key):k_end].strip()
        args[name_of_arg] = typed(body[v_start + len(value):v_end], param_schema(tools, name, name_of_arg))
        at = v_end + len(value_end)
    return call(name, args) if "\n" not in name and "{" not in name else None


def key_value_split(open_: str, close: str, tags: tuple[str, str, str, str], sep: str = "",
                    wrap: tuple[str, ...] = ()) -> SplitFn:
    """The split of key/value calls inside `open_ ... close` blocks (`wrap`: section tags dropped from the text)."""
    return block_split(open_, close, one_call(lambda body, tools: key_values(body, tools, tags, sep)), wrap)


GLM45 = ToolFormat("glm45", ("glm45", "glm47"), (OPEN,), key_value_split(OPEN, CLOSE, (KEY, KEY_END, VALUE, VALUE_END)),
                   lambda template: KEY in template and OPEN in template,
                   example="<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>")

HY = ":opensource"
HY_TAGS = (f"<arg_key{HY}>", f"</arg_key{HY}>", f"<arg_value{HY}>", f"</arg_value{HY}>")
HY_SECTION = (f"<tool_calls{HY}>", f"</tool_calls{HY}>")
HY_V3 = ToolFormat("hy_v3", ("hy_v3",), (HY_SECTION[0], f"<tool_call{HY}>"),
                   key_value_split(f"<tool_call{HY}>", f"</tool_call{HY}>", HY_TAGS, f"<tool_sep{HY}>", HY_SECTION),
                   lambda template: "<tool_sep{}>" in template or f"<tool_sep{HY}>" in template,
                   example=f"{HY_SECTION[0]}\n<tool_call{HY}>get_weather<tool_sep{HY}>\n{HY_TAGS[0]}city{HY_TAGS[1]}\n"
                           f"{HY_TAGS[2]}Paris{HY_TAGS[3]}\n</tool_call{HY}>\n{HY_SECTION[1]}")
