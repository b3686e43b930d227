"""Where a model's reasoning sits in its answer, per family (the text between `open` and `close`, ahead of the
answer; vLLM's reasoning parsers of the same names). gpt-oss's harmony channels carry reasoning as the analysis
channel: harmony.py reads those.

A block counts as reasoning when the answer opens it, or when the generation prompt already did (DeepSeek-R1,
Qwen3.5: the prompt ends in `<think>\\n`); an answer whose opened block never closes is all reasoning (vLLM does the
same). Reading a whole answer without its prompt, a `close` with no `open` before it means the prompt opened it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Reasoning:
    name: str
    vllm: tuple[str, ...]       # vLLM --reasoning-parser names that read the same blocks
    open: str
    close: str


THINK = Reasoning("think", ("qwen3", "deepseek_r1", "deepseek_v3", "glm45", "granite", "olmo3"), "<think>", "</think>")
MISTRAL = Reasoning("mistral", ("mistral",), "[THINK]", "[/THINK]")
GEMMA4 = Reasoning("gemma4", ("gemma4",), "<|channel>thought", "<channel|>")
SEED = Reasoning("seed_oss", ("seed_oss",), "<seed:think>", "</seed:think>")
HY_V3 = Reasoning("hy_v3", ("hy_v3",), "<think:opensource>", "</think:opensource>")
REASONINGS = (THINK, MISTRAL, GEMMA4, SEED, HY_V3)


def reasoning_of(template: Optional[str]) -> Optional[Reasoning]:
    """The reasoning blocks a chat template writes (None: no reasoning of its own)."""
    t = template or ""
    if MISTRAL.open in t:
        return MISTRAL
    if SEED.open in t:
        return SEED
    if "<think{}>" in t or HY_V3.open in t:
        return HY_V3
    if "<|channel>" in t:
        return GEMMA4
    if THINK.open in t or THINK.close in t:
        return THINK
    return None


def opened_by(prompt_tail: str, reasoning: Optional[Reasoning]) -> bool:
    """Whether the generation prompt leaves a reasoning block open (its text ends in the opener)."""
    return reasoning is not None and prompt_tail.rstrip().endswith(reasoning.open)
