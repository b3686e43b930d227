"""The body pieces every API family shares: one SSE event (plain, or with an event name as Anthropic's and the
Responses API's streams carry), ids in the Anthropic / Responses style, and the bodies of the shared routes
(the model list, a model card, health); `rendered`, the typed engine events of a chat answer streamed in a
translated family's wire format (anthropic/render.py, responses/render.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, Union

from swiftbox.serving.protocol import Health, ListedModel, ModelCard, ModelList, ResponseBody, now

if TYPE_CHECKING:
    from swiftbox.serving.events import Event


def sse(body: Union[ResponseBody, dict[str, Any]], exclude: Optional[set[str]] = None) -> str:
    """One server-sent event."""
    import json

    text = body.model_dump_json(exclude=exclude) if isinstance(body, ResponseBody) else json.dumps(body)
    return f"data: {text}\n\n"



def model_list(names: list[str]) -> ModelList:
    """GET /v1/models: the base model first, then its adapters (parent: the base)."""
    created = now()
    return ModelList(data=[ListedModel(id=name, created=created, root=names[0], parent=None if i == 0 else names[0])
                           for i, name in enumerate(names)])


def model_card(name: str) -> ModelCard:
    return ModelCard(id=name, created=now())


def health(ok: bool, engine: str) -> Health:
    return Health(status="ok" if ok else "unhealthy", engine=engine)



def uid(prefix: str) -> str:
    """An id in the Anthropic / Responses style: prefix_hex."""
    import uuid

    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def named_event(name: str, body: dict[str, Any]) -> str:
    """An SSE event with a name line (Anthropic's and the Responses API's streams both carry one)."""
    import json

    return f"event: {name}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


async def rendered(bodies: Any, events: AsyncIterator[Event], on_end: Optional[Callable[[list], None]] = None
                   ) -> AsyncIterator[str]:
    """A chat answer's typed events as a family's SSE events: `bodies` (anthropic MessagesBuilder / responses
    ResponsesBuilder) opens the stream, renders each event (`feed`) and closes it with the usage (`end`);
    `on_end(bodies.items)` once the answer is complete without a failure (the Responses store). The event stream
    is closed however this one ends (a client gone mid-answer frees its sequences)."""
    from swiftbox.serving.events import Done, Failed

    try:
        for out in bodies.start():
            yield out
        used, failed = None, False
        async for event in events:
            if isinstance(event, Done):
                used = event.usage
                continue
            failed = failed or isinstance(event, Failed)
            for out in bodies.feed(event):
                yield out
        for out in bodies.end(used):
            yield out
        if on_end is not None and not failed:
            on_end(bodies.items)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
