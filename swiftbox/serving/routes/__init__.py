"""The HTTP routes, one thin router per endpoint: each validates its body (protocol.py), checks what only the
front door can check (the model name, the adapter policy) and hands over to the app's one `Backend`.

    chat.py          POST /v1/chat/completions
    completions.py   POST /v1/completions
    models.py        GET  /v1/models, /v1/models/{model}
    messages.py      POST /v1/messages, /v1/messages/count_tokens (Anthropic Messages, onto the chat path)
    responses.py     POST /v1/responses (OpenAI Responses, onto the chat path)
    adapters.py      POST /v1/load_lora_adapter, /v1/unload_lora_adapter
    system.py        GET/HEAD /health, GET /metrics

The helpers below are what they share: the backend and metrics of the app serving the request, and the
model-name check, and the event stream of a translated endpoint.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional

from swiftbox.serving.errors import model_not_found

if TYPE_CHECKING:
    from starlette.requests import Request

    from swiftbox.serving.backend import Backend
    from swiftbox.serving.metrics import ServeMetrics


def backend_of(request: Request) -> Backend:
    return request.app.state.backend


def metrics_of(request: Request) -> ServeMetrics:
    return request.app.state.metrics


def check_model(backend: Backend, name: str) -> None:
    known = backend.model_names()
    if name not in known:
        raise model_not_found(name, known)


async def event_stream(bodies: Any, answer: Any, on_end: Optional[Callable[[list], None]] = None
                       ) -> AsyncIterator[str]:
    """A streamed chat answer re-shaped by `bodies` (responses.MessagesBuilder / ResponsesBuilder: start, feed,
    end); `on_end(bodies.items)` once the answer is complete (the Responses store)."""
    from swiftbox.serving.translate import pieces

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


def routers() -> list[Any]:
    """Every router, in the order the app includes them."""
    from swiftbox.serving.routes import adapters, chat, completions, messages, models, responses, system

    return [system.router, models.router, chat.router, completions.router, messages.router, responses.router,
            adapters.router]
