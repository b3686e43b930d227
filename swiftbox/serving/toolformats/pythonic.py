"""Calls written as Python (vLLM's pythonic / lfm2 / olmo3): a list of calls, or one call a line, with literal
keyword arguments, read with the `ast` module (never evaluated):

    [get_weather(city='Paris')]                                                pythonic (Llama 3.2 / 4 style)
    <|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>           LFM2
    <function_calls>get_weather(city="Paris")</function_calls>                 OLMo 3
"""
from __future__ import annotations

import ast
from typing import Optional

from swiftbox.serving.toolformats.base import Split, ToolFormat, Tools, blocks, call

MAX_CHARS = 1_000_000


def calls_of(source: str) -> Optional[list[dict]]:
    """The calls a Python snippet spells (a list of calls, or call expressions), None for anything else."""
    if len(source) > MAX_CHARS:
        return None
    try:
        tree = ast.parse(source.strip(), mode="exec")
        found: list[dict] = []
        for stmt in tree.body:
            if not isinstance(stmt, ast.Expr):
                return None
            nodes = stmt.value.elts if isinstance(stmt.value, ast.List) else [stmt.value]
            for node in nodes:
                if not (isinstance(node, ast.Call) and not node.args and isinstance(node.func, (ast.Name,
                                                                                               ast.Attribute))):
                    return None
                name = ast.unparse(node.func)
                args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
                if len(args) != len(node.keywords):
                    return None
                one = call(name, args)
                if one is None:
                    return None
                found.append(one)
        return found or None
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def _tagged(open_: str, close: str):
    def split(text: str, tools: Tools) -> Optional[Split]:
        bodies, outside, _ = blocks(text, open_, close)
        calls: list[dict] = []
        for body in bodies:
            found = calls_of(body)
            if found is None:
                return None
            calls += found
        return ("".join(outside), calls) if calls else None
    return split


def _bare(text: str, tools: Tools) -> Optional[Split]:
    found = calls_of(text)
    return ("", found) if found else None


PYTHONIC = ToolFormat("pythonic", ("pythonic", "llama4_pythonic"), (), _bare, lambda template: False,
                      leading=("[",), example="[get_weather(city='Paris')]")
LFM2 = ToolFormat("lfm2", ("lfm2",), ("<|tool_call_start|>",), _tagged("<|tool_call_start|>", "<|tool_call_end|>"),
                  lambda template: "<|tool_call_start|>" in template,
                  example="<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>")
OLMO3 = ToolFormat("olmo3", ("olmo3",), ("<function_calls>",), _tagged("<function_calls>", "</function_calls>"),
                   lambda template: "<function_calls>" in template,
                   example='<function_calls>get_weather(city="Paris")</function_calls>')
