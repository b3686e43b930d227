"""What an engine hands over for one finished choice, whatever API asked: an `Output` (the answer's text with
tool calls and reasoning split out, its finish reason, its logprobs in the endpoint's shape, the stop string that
ended it). Every API family builds its body from these (openai/render.py, anthropic/render.py,
responses/render.py), so every engine serves every family without knowing it exists."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

if TYPE_CHECKING:
    from swiftbox.serving.toolformats import Parsed


@dataclass
class Output:
    """One finished choice, engine-neutral: every endpoint's body is built from these."""

    index: int
    text: Optional[str]                 # the answer's content (None: the answer is only tool calls)
    finish_reason: Optional[str]        # stop | length | tool_calls | ...
    reasoning: Optional[str] = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)   # {id, type: function, function: {name, arguments}}
    logprobs: Optional[dict[str, Any]] = None
    stop_reason: Union[str, int, None] = None      # the stop string that ended it (vLLM's field; None: EOS, length)


def output(index: int, text: str, finish_reason: Optional[str], parser: Optional[Callable[[str], Parsed]] = None,
           logprobs: Optional[dict[str, Any]] = None) -> Output:
    """The engine's finished text as an Output: tool calls and reasoning split out by `parser` (toolformats'
    reader for the model's format); finish_reason becomes "tool_calls" where calls were found, as OpenAI reports it."""
    parsed = parser(text) if parser else None
    if parsed is None:
        return Output(index, text, finish_reason, logprobs=logprobs)
    reason = "tool_calls" if parsed.tool_calls and finish_reason == "stop" else finish_reason
    return Output(index, parsed.content, reason, parsed.reasoning, list(parsed.tool_calls), logprobs)
