"""The one front door: a FastAPI app with every API family's routes, whatever engine answers behind it.

`build_app(backend)` assembles it: the routers (`routers()`: each API family's folder - openai/, anthropic/,
responses/ - and the shared routes/), OpenAI's error shape for every failure (errors.py), the Guard middleware
(guard.py: API key, body limit) and RequestCounter (metrics.py: every answer counted, the guard's 401/413 too).
The routes validate requests (each family's protocol.py), check the model name and hand over to `backend`, the
app's one `Backend` (backend.py): the built-in engine (builtin/backend.py) or the vLLM relay (vllm/child.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftbox.serving.errors import install_handlers

if TYPE_CHECKING:
    from fastapi import FastAPI

    from swiftbox.serving.backend import Backend

MAX_BODY = 4 * 1024 * 1024


def build_app(backend: Backend, *, api_key: str | None = None, max_body: int = MAX_BODY,
              metrics_public: bool = False) -> FastAPI:
    """The app serving `backend`; it sets `backend.observer` to the app's metrics."""
    from fastapi import FastAPI

    from swiftbox.serving.guard import OPEN_PATHS, Guard
    from swiftbox.serving.metrics import RequestCounter, ServeMetrics
    from swiftbox.serving.responses.store import ResponseStore

    app = FastAPI(title="swiftbox", version="1", description="OpenAI-compatible API served by swiftbox")
    install_handlers(app)
    serve_metrics = ServeMetrics(backend.engine_stats())
    backend.observer = serve_metrics
    open_paths = OPEN_PATHS | ({"/metrics"} if metrics_public else set())
    app.add_middleware(Guard, api_key=api_key, max_body=max_body, open_paths=open_paths)
    app.add_middleware(RequestCounter, metrics=serve_metrics)   # outermost: sees the guard's 401/413 too
    app.state.backend = backend
    app.state.metrics = serve_metrics
    app.state.response_store = ResponseStore()      # /v1/responses' previous_response_id
    for router in routers():
        app.include_router(router)
    return app


def routers() -> list[Any]:
    """Every router, in the order the app includes them."""
    from swiftbox.serving.anthropic import route as messages
    from swiftbox.serving.openai import routes as openai
    from swiftbox.serving.responses import route as responses
    from swiftbox.serving.routes import adapters, models, system

    return [system.router, models.router, openai.router, messages.router, responses.router, adapters.router]
