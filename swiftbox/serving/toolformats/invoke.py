"""`<invoke name="...">` calls with named parameters (vLLM's minimax_m2 and deepseek_v32 / deepseek_v4):

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>                                                        MiniMax-M2

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>                                                        DeepSeek-V3.2 / V4 (DSML)

A block may hold several invokes. MiniMax's values are typed by the tool's schema; DSML says per parameter whether
it is a string (`string="true"`) or JSON (`string="false"`).
"""
from __future__ import annotations

from typing import Optional

from swiftbox.serving.toolformats.base import MALFORMED, ToolFormat, Tools, call, loads, param_schema, typed
from swiftbox.serving.toolformats.sections import SplitFn, block_split


def attribute(tag: str, name: str) -> Optional[str]:
    """The value of name="..." in a tag's text."""
    at = tag.find(f'{name}="')
    if at < 0:
        return None
    end = tag.find('"', at + len(name) + 2)
    return tag[at + len(name) + 2:end] if end >= 0 else None


def invokes(region: str, tools: Tools, prefix: str) -> Optional[list[dict]]:
    """The calls of `<{prefix}invoke name=..>` elements in a block (None: malformed, or none)."""
    inv, inv_end = f"<{prefix}invoke", f"</{prefix}invoke>"
    par, par_end = f"<{prefix}parameter", f"</{prefix}parameter>"
    found: list[dict] = []
    at = 0
    while (start := region.find(inv, at)) >= 0:
        head_end = region.find(">", start)
        end = region.find(inv_end, head_end) if head_end >= 0 else -1
        if end < 0:
            return None
        name = attribute(region[start:head_end], "name")
        body = region[head_end + 1:end]
        args = {}
        p_at = 0
        while (p := body.find(par, p_at)) >= 0:
            p_head = body.find(">", p)
            p_end = body.find(par_end, p_head) if p_head >= 0 else -1
            if p_end < 0:
                return None
            tag = body[p:p_head]
            key = attribute(tag, "name")
            if key is None or name is None:
                return None
            value = body[p_head + 1:p_end]
            kind = attribute(tag, "string")
            if kind == "false":
                value = loads(value.strip())
                if value is MALFORMED:
                    return None
                args[key] = value
            else:
                args[key] = value if kind == "true" else typed(value.strip("\n"), param_schema(tools, name, key))
            p_at = p_end + len(par_end)
        one = call(name or "", args)
        if one is None:
            return None
        found.append(one)
        at = end + len(inv_end)
    return found or None


def _invoke_split(open_: str, close: str, prefix: str) -> SplitFn:
    return block_split(open_, close, lambda body, tools: invokes(body, tools, prefix))


M_OPEN, M_CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
MINIMAX_M2 = ToolFormat("minimax_m2", ("minimax_m2",), (M_OPEN,), _invoke_split(M_OPEN, M_CLOSE, ""),
                        lambda template: M_OPEN in template,
                        example=f'{M_OPEN}\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                                f"</invoke>\n{M_CLOSE}")
DSML = "｜DSML｜"
D_OPEN, D_CLOSE = f"<{DSML}tool_calls>", f"</{DSML}tool_calls>"
DEEPSEEK_DSML = ToolFormat("deepseek_dsml", ("deepseek_v32", "deepseek_v4"), (D_OPEN,),
                           _invoke_split(D_OPEN, D_CLOSE, DSML), lambda template: DSML in template,
                           example=f'{D_OPEN}\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" '
                                   f'string="true">Paris</{DSML}parameter>\n</{DSML}invoke>\n{D_CLOSE}')
