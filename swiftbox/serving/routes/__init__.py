"""The routes every API family shares, and what every route uses.

    models.py        GET  /v1/models, /v1/models/{model}
    adapters.py      POST /v1/load_lora_adapter, /v1/unload_lora_adapter
    system.py        GET/HEAD /health, GET /metrics

Each API family keeps its own route beside its protocol: openai/routes.py (POST /v1/chat/completions,
/v1/completions), anthropic/route.py (POST /v1/messages, /v1/messages/count_tokens), responses/route.py
(/v1/responses). Each validates its body, checks what only the front door can check (the model name, the adapter
policy) and hands over to the app's one `Backend`. The helpers below are what they share: the backend and metrics
of the app serving the request, and the model-name check. app.routers() lists every router.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

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
