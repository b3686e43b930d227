"""An OpenAI chat answer read back: its SSE stream as the typed engine event stream (`events`, events.py: what
the vLLM relay's chat stream becomes for the families that render events), an error body as an ApiError."""
from __future__ import annotations

import json
from typing import Any, AsyncIterator

from swiftbox.serving.errors import ApiError
from swiftbox.serving.events import (
    Done,
    Event,
    Failed,
    Finish,
    ReasoningDelta,
    Started,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
)
from swiftbox.serving.protocol import usage


def error(status: int, data: Any) -> ApiError:
    err = data.get("error") if isinstance(data, dict) else None
    found = err if isinstance(err, dict) else {}
    kind = found.get("type") or ("invalid_request_error" if found else "server_error")
    return ApiError(status if 400 <= status < 500 else 503, str(found.get("message") or data)[:1000], type=kind)


async def events(body: AsyncIterator[Any]) -> AsyncIterator[Event]:
    """A streamed chat answer (its SSE body, bytes or text) as typed events, in order: Started at the first chunk
    (its choices as they appear), each chunk's token logprobs, reasoning and content deltas, each tool call opened
    (index, id, name) then its argument pieces, each choice's Finish (with the stop string vLLM reports as
    `stop_reason`), Done with the usage (when the stream carries it), Failed for an error event. The body is closed
    at the end, or when the reader stops early."""
    buffer = ""
    opened: set[tuple[int, int]] = set()
    started = False
    try:
        async for chunk in body:
            buffer += chunk.decode() if isinstance(chunk, (bytes, bytearray)) else chunk
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                data = "".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
                if not data or data == "[DONE]":
                    continue
                found = json.loads(data)
                if "error" in found:
                    yield Failed(error(400, found))
                    continue
                choices = found.get("choices") or []
                if not started and choices:
                    started = True
                    yield Started(1 + max(int(c.get("index", 0)) for c in choices))
                for choice in choices:
                    for out in _choice_events(choice, opened):
                        yield out
                if found.get("usage"):
                    u = found["usage"]
                    yield Done(usage(u["prompt_tokens"], u["completion_tokens"]))
    finally:
        close = getattr(body, "aclose", None)
        if close is not None:
            await close()      # the answer's own finally: its sequences are cancelled, metrics observed


def _choice_events(choice: dict[str, Any], opened: set[tuple[int, int]]) -> list[Event]:
    index = int(choice.get("index", 0))
    delta = choice.get("delta") or {}
    out: list[Event] = []
    for item in ((choice.get("logprobs") or {}).get("content") or []):
        top = tuple((t["token"], float(t["logprob"])) for t in item.get("top_logprobs") or [])
        out.append(TokenLogprob(index, item["token"], float(item["logprob"]), top))
    if delta.get("reasoning_content"):
        out.append(ReasoningDelta(index, delta["reasoning_content"]))
    if delta.get("content"):
        out.append(TextDelta(index, delta["content"]))
    for call in delta.get("tool_calls") or []:
        number = int(call.get("index", 0))
        fn = call.get("function") or {}
        if (index, number) not in opened:
            opened.add((index, number))
            out.append(ToolCallDelta(index, number, call.get("id"), fn.get("name") or ""))
        if fn.get("arguments"):
            out.append(ToolCallDelta(index, number, arguments=fn["arguments"]))
    if choice.get("finish_reason"):
        stop = choice.get("stop_reason")
        out.append(Finish(index, choice["finish_reason"], stop if isinstance(stop, str) else None))
    return out
