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

from swiftbox.serving.toolformats.base import MALFORMED, ToolFormat, call, loads
from swiftbox.serving.toolformats.sections import section_split

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


DEEPSEEK = ToolFormat("deepseek", ("deepseek_v31", "deepseek_v3"), (BEGIN,),
                      section_split(BEGIN, END, CALL, CALL_END, _one), lambda template: BEGIN in template,
                      example=f'{BEGIN}{CALL}get_weather{SEP}{{"city": "Paris"}}{CALL_END}{END}')
