"""What an engine hands over for one finished choice, whatever API asked: an `Output` (the answer's text with
tool calls and reasoning split out, its finish reason, its logprobs in the endpoint's shape, the stop string that
ended it). Every API family builds its body from these (openai/render.py, anthropic/render.py,
responses/render.py), so every engine serves every family without knowing it exists. `gathered` builds one from
an answer's typed event stream (events.py): the whole body of a translated family."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, Union

if TYPE_CHECKING:
    from swiftbox.serving.events import Event
    from swiftbox.serving.protocol import Usage
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


DISCONNECT_POLL_S = 0.25


async def gathered(events: AsyncIterator[Event], request: Any) -> Optional[tuple[Output, Usage]]:
    """Choice 0 of an answer's typed event stream (events.py) gathered into one Output and the usage: what the
    translated families (anthropic/, responses/) render as a whole body. A Failed event raises its error. None:
    the client went away first (`request.is_disconnected()`, polled while the answer runs; the event stream is
    closed, which frees its sequences)."""
    import asyncio

    task = asyncio.ensure_future(_gather(events))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if request is not None and await request.is_disconnected():
                return None
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


async def _gather(events: AsyncIterator[Event]) -> tuple[Output, Usage]:
    from swiftbox.serving import events as ev
    from swiftbox.serving.protocol import usage

    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: Optional[ev.Finish] = None
    used = usage(0, 0)
    async for event in events:
        if getattr(event, "index", 0) != 0:
            continue
        if isinstance(event, ev.TextDelta):
            text.append(event.text)
        elif isinstance(event, ev.ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ev.ToolCallDelta):
            if event.opens:
                calls[event.call] = {"id": event.id or f"call_{event.call}", "type": "function",
                                     "function": {"name": event.name or "", "arguments": ""}}
            if event.arguments and event.call in calls:
                calls[event.call]["function"]["arguments"] += event.arguments
        elif isinstance(event, ev.Finish):
            finish = event
        elif isinstance(event, ev.Done):
            used = event.usage
        elif isinstance(event, ev.Failed):
            raise event.error
    return (Output(0, "".join(text) if text else None, finish.reason if finish else None,
                   "".join(reasoning) or None, [calls[k] for k in sorted(calls)],
                   stop_reason=finish.stop_sequence if finish else None), used)
