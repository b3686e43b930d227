"""DeepSeek's tool-call tokens (vLLM's deepseek_v31 / deepseek_v3):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>
    <｜tool▁calls▁end｜>                                                    DeepSeek-V3.1 (one line)
    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>                               DeepSeek-V3 / R1-0528
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, call, loads

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _one(body: str) -> Optional[dict]:
    head, sep, rest = body.partition(SEP)
    if not sep:
        return None
    rest = rest.strip()
    if head.strip() == "function" and "\n" in rest:          # V3: type, name, then a ```json block
        name, _, rest = rest.partition("\n")
        rest = rest.strip().removeprefix("```json").removesuffix("```").strip()
        head = name
    args = loads(rest)
    return call(head, args) if args is not MALFORMED else None


def _split(text: str, tools: Tools) -> Optional[Split]:
    start = text.find(BEGIN)
    if start < 0:
        return None
    end = text.find(END, start)
    region = text[start + len(BEGIN):end if end >= 0 else len(text)]
    after = text[end + len(END):] if end >= 0 else ""
    calls = []
    at = 0
    while (s := region.find(CALL, at)) >= 0:
        e = region.find(CALL_END, s)
        if e < 0:
            return None
        found = _one(region[s + len(CALL):e])
        if found is None:
            return None
        calls.append(found)
        at = e + len(CALL_END)
    return (text[:start] + after, calls) if calls else None


DEEPSEEK = ToolFormat("deepseek", ("deepseek_v31", "deepseek_v3"), (BEGIN,), _split, lambda template: BEGIN in template,
                      example=f'{BEGIN}{CALL}get_weather{SEP}{{"city": "Paris"}}{CALL_END}{END}')
