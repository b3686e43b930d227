"""The one front door: a FastAPI app with the OpenAI routes, whatever engine answers behind it.

Routes: GET/HEAD /health (open), GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
GET /metrics (Prometheus; open with metrics_public), POST /v1/load_lora_adapter and /v1/unload_lora_adapter
(adapters.py). The Guard middleware applies the API key and body limit; RequestCounter (metrics.py) counts
every answer; errors.py gives every failure OpenAI's error shape. Requests are validated here (protocol.py)
and the model name is checked here, then handed to the backend: the built-in engine (backend_builtin.py)
or the vLLM proxy (engine_vllm.py).
"""

from typing import Any

from swiftbox.pipelines.serve.errors import ApiError, install_handlers, model_not_found
from swiftbox.pipelines.serve.protocol import ChatCompletionRequest, CompletionRequest, now

MAX_BODY = 4 * 1024 * 1024


def build_app(backend, *, api_key: str | None = None, max_body: int = MAX_BODY, metrics_public: bool = False):
    """`backend` offers model_names(), chat(req, raw, request), completion(req, raw, request), healthy(),
    load_adapter(name, path) and unload_adapter(name) (async where they talk to a model), and optionally
    `runtime_adapters` (an AdapterPolicy; None: the adapter routes answer 403), `engine_stats()` (an
    EngineStats for /metrics), `observer` (set here: the ServeMetrics its requests report to) and
    `extra_metrics()` (async: more Prometheus text, e.g. vLLM's own)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from swiftbox.pipelines.serve import adapters
    from swiftbox.pipelines.serve.guard import OPEN_PATHS, Guard
    from swiftbox.pipelines.serve.metrics import CONTENT_TYPE, RequestCounter, ServeMetrics

    app = FastAPI(title="swiftbox", version="1", description="OpenAI-compatible API served by swiftbox")
    install_handlers(app)
    stats = getattr(backend, "engine_stats", None)
    serve_metrics = ServeMetrics(stats() if stats else None)
    if hasattr(backend, "observer"):
        backend.observer = serve_metrics
    open_paths = OPEN_PATHS | ({"/metrics"} if metrics_public else set())
    app.add_middleware(Guard, api_key=api_key, max_body=max_body, open_paths=open_paths)
    app.add_middleware(RequestCounter, metrics=serve_metrics)   # outermost: sees the guard's 401/413 too
    app.state.backend = backend
    app.state.metrics = serve_metrics

    def check_model(name: str) -> None:
        known = backend.model_names()
        if name not in known:
            raise model_not_found(name, known)

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():
        if not await backend.healthy():
            return JSONResponse({"status": "unhealthy", "engine": backend.name}, status_code=503)
        return {"status": "ok", "engine": backend.name}

    @app.get("/v1/models")
    async def models():
        created = now()
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "swiftbox",
             "root": backend.model_names()[0], "parent": None if i == 0 else backend.model_names()[0]}
            for i, name in enumerate(backend.model_names())]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        check_model(model_id)
        return {"id": model_id, "object": "model", "created": now(), "owned_by": "swiftbox"}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request):
        check_model(body.model)
        return await backend.chat(body, await _raw(request), request)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        check_model(body.model)
        return await backend.completion(body, await _raw(request), request)

    @app.get("/metrics")
    async def metrics():
        body = serve_metrics.render()
        extra = getattr(backend, "extra_metrics", None)
        if extra is not None:
            body += await extra()
        return Response(body, media_type=CONTENT_TYPE)

    adapters.install(app, backend, serve_metrics)

    return app


async def _raw(request) -> dict[str, Any]:
    try:
        data = await request.json()
    except Exception:
        raise ApiError(400, "We could not parse the JSON body of your request", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data
