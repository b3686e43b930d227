"""The two ways formats lay their calls out in an answer, read once here (each format brings only how one call
reads):

    block_split(open_, close, read)     calls inside `open_ ... close` blocks, each block read by `read(body, tools)`
                                        into its calls (hermes, internlm, apertus, qwen3_xml, seed_oss, glm45 / glm47,
                                        hy_v3, minimax_m2, deepseek_dsml); `wrap`: section tags dropped from the text
    section_split(begin, end, ...)      one section holding delimited calls, each read by `one(body)` (deepseek,
                                        kimi_k2); the section may be left open at the end of the answer

Either way a call that does not read spoils the whole answer: no calls at all, the text stays as it is.
"""
from __future__ import annotations

from typing import Callable, Optional

from swiftbox.serving.toolformats.base import Split, Tools, blocks

SplitFn = Callable[[str, Tools], Optional[Split]]
BlockReader = Callable[[str, Tools], Optional[list[dict]]]


def one_call(read: Callable[[str, Tools], Optional[dict]]) -> BlockReader:
    """A reader of blocks that hold one call each."""
    def calls(body: str, tools: Tools) -> Optional[list[dict]]:
        found = read(body, tools)
        return None if found is None else [found]
    return calls


def block_split(open_: str, close: str, read: BlockReader, wrap: tuple[str, ...] = ()) -> SplitFn:
    """The split of calls in closed `open_ ... close` blocks (an unclosed one stays text)."""
    def split(text: str, tools: Tools) -> Optional[Split]:
        bodies, outside, _unclosed = blocks(text, open_, close)
        calls: list[dict] = []
        for body in bodies:
            found = read(body, tools)
            if found is None:
                return None
            calls += found
        rest = "".join(outside)
        for tag in wrap:
            rest = rest.replace(tag, "")
        return (rest, calls) if calls else None
    return split


def section_split(begin: str, end: str, call_open: str, call_close: str,
                  one: Callable[[str], Optional[dict]]) -> SplitFn:
    """The split of `begin (call_open BODY call_close)... end` (`end` may be missing: the answer stopped there)."""
    def split(text: str, tools: Tools) -> Optional[Split]:
        start = text.find(begin)
        if start < 0:
            return None
        stop = text.find(end, start)
        region = text[start + len(begin):stop if stop >= 0 else len(text)]
        calls = []
        at = 0
        while (s := region.find(call_open, at)) >= 0:
            e = region.find(call_close, s)
            if e < 0:
                return None
            found = one(region[s + len(call_open):e])
            if found is None:
                return None
            calls.append(found)
            at = e + len(call_close)
        after = text[stop + len(end):] if stop >= 0 else ""
        return (text[:start] + after, calls) if calls else None
    return split
