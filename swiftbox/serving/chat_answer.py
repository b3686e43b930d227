"""The chat answer read back for the translated APIs (Anthropic Messages, OpenAI Responses): a JSON answer as
(Output, Usage) (`whole`), an SSE answer as engine-neutral pieces (`pieces`), and `event_stream`, the streamed
answer re-shaped by a family's builder."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional

from swiftbox.serving.answer import Output
from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import usage

if TYPE_CHECKING:
    from starlette.responses import Response

    from swiftbox.serving.protocol import Usage


def _error(status: int, data: Any) -> ApiError:
    err = data.get("error") if isinstance(data, dict) else None
    found = err if isinstance(err, dict) else {}
    kind = found.get("type") or ("invalid_request_error" if found else "server_error")
    return ApiError(status if 400 <= status < 500 else 503, str(found.get("message") or data)[:1000], type=kind)


def whole(response: Response) -> tuple[Output, Usage]:
    """The first choice and the usage of a JSON chat answer (an error answer raises it as ApiError)."""
    data = json.loads(bytes(response.body))
    if response.status_code != 200:
        raise _error(response.status_code, data)
    choice, u = data["choices"][0], data["usage"]
    msg = choice["message"]
    return (Output(0, msg.get("content"), choice.get("finish_reason"), msg.get("reasoning_content"),
                   list(msg.get("tool_calls") or []), stop_reason=choice.get("stop_reason")),
            usage(u["prompt_tokens"], u["completion_tokens"]))


async def pieces(response: Response) -> AsyncIterator[tuple[str, Any]]:
    """The pieces of a streamed chat answer, in order: ("reasoning", text), ("text", text), ("tool", {index, id,
    name}), ("args", (index, text)), ("stop_sequence", the stop string that ended it), ("finish", reason),
    ("usage", Usage), ("error", ApiError)."""
    iterator = response.body_iterator     # type: ignore[attr-defined]
    buffer = ""
    seen_tools: set[int] = set()
    try:
        async for chunk in iterator:
            buffer += chunk.decode() if isinstance(chunk, (bytes, bytearray)) else chunk
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                data = "".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
                if not data or data == "[DONE]":
                    continue
                body = json.loads(data)
                if "error" in body:
                    yield "error", _error(400, body)
                    continue
                for choice in body.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("reasoning_content"):
                        yield "reasoning", delta["reasoning_content"]
                    if delta.get("content"):
                        yield "text", delta["content"]
                    for call in delta.get("tool_calls") or []:
                        index = call.get("index", 0)
                        fn = call.get("function") or {}
                        if index not in seen_tools:
                            seen_tools.add(index)
                            yield "tool", {"index": index, "id": call.get("id"), "name": fn.get("name")}
                        if fn.get("arguments"):
                            yield "args", (index, fn["arguments"])
                    if isinstance(choice.get("stop_reason"), str):
                        yield "stop_sequence", choice["stop_reason"]
                    if choice.get("finish_reason"):
                        yield "finish", choice["finish_reason"]
                if body.get("usage"):
                    u = body["usage"]
                    yield "usage", usage(u["prompt_tokens"], u["completion_tokens"])
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()      # the chat run's own finally: its sequences are cancelled, metrics observed


async def event_stream(bodies: Any, answer: Any, on_end: Optional[Callable[[list], None]] = None
                       ) -> AsyncIterator[str]:
    """A streamed chat answer re-shaped by `bodies` (anthropic MessagesBuilder / responses ResponsesBuilder: start,
    feed, end); `on_end(bodies.items)` once the answer is complete (the Responses store)."""
    for event in bodies.start():
        yield event
    used, failed = None, False
    async for kind, value in pieces(answer):
        if kind == "usage":
            used = value
            continue
        failed = failed or kind == "error"
        for event in bodies.feed(kind, value):
            yield event
    for event in bodies.end(used):
        yield event
    if on_end is not None and not failed:
        on_end(bodies.items)
