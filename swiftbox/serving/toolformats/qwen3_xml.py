"""XML inside `<tool_call>` (Qwen3-Coder, Qwen3.5; vLLM's qwen3_xml / qwen3_coder):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A parameter's text is the value; the tool's schema types it (a string parameter keeps the text, others take the JSON
value the text spells), as vLLM's parser does. One newline after `<parameter=..>` and before `</parameter>` is the
template's, not the value's.
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import ToolFormat, Tools, call, param_schema, typed
from swiftbox.serving.toolformats.hermes import CLOSE, OPEN
from swiftbox.serving.toolformats.sections import SplitFn, block_split, one_call

FUNC, FUNC_END, PARAM, PARAM_END = "<function=", "</function>", "<parameter=", "</parameter>"


def _trim(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _one(body: str, tools: Tools) -> Optional[dict]:
    body = body.strip()
    if not body.startswith(FUNC):
        return None
    head_end = body.find(">")
    if head_end < 0:
        return None
    name = body[len(FUNC):head_end].strip()
    end = body.rfind(FUNC_END)
    inner = body[head_end + 1:end if end > head_end else len(body)]
    args = {}
    at = 0
    while (start := inner.find(PARAM, at)) >= 0:
        key_end = inner.find(">", start)
        close = inner.find(PARAM_END, key_end + 1) if key_end >= 0 else -1
        if key_end < 0 or close < 0:
            return None
        key = inner[start + len(PARAM):key_end].strip()
        args[key] = typed(_trim(inner[key_end + 1:close]), param_schema(tools, name, key))
        at = close + len(PARAM_END)
    return call(name, args)


def xml_split(open_: str, close: str) -> SplitFn:
    """The split of `<function=..>` calls inside `open_ ... close` blocks."""
    return block_split(open_, close, one_call(_one))


QWEN3_XML = ToolFormat("qwen3_xml", ("qwen3_xml", "qwen3_coder"), (OPEN,), xml_split(OPEN, CLOSE),
                       lambda template: OPEN in template and FUNC in template and PARAM in template,
                       example="<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
                               "\n</tool_call>")
SEED_OPEN, SEED_CLOSE = "<seed:tool_call>", "</seed:tool_call>"
SEED_OSS = ToolFormat("seed_oss", ("seed_oss",), (SEED_OPEN,), xml_split(SEED_OPEN, SEED_CLOSE),
                      lambda template: SEED_OPEN in template,
                      example=f"{SEED_OPEN}\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
                              f"{SEED_CLOSE}")
