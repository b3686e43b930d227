"""The body pieces every API family shares: one SSE event (plain, or with an event name as Anthropic's and the
Responses API's streams carry), ids in the Anthropic / Responses style, and the bodies of the shared routes
(the model list, a model card, health)."""
from __future__ import annotations

from typing import Any, Optional, Union

from swiftbox.serving.protocol import Health, ListedModel, ModelCard, ModelList, ResponseBody, now


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
