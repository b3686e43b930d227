"""The one front door: a FastAPI app with the OpenAI routes, whatever engine answers behind it.

Routes: GET/HEAD /health (open), GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
GET /metrics. The Guard middleware applies the API key and body limit; errors.py gives every failure
OpenAI's error shape. Requests are validated here (protocol.py) and the model name is checked here,
then handed to the backend: the built-in engine (backend_builtin.py) or the vLLM proxy (engine_vllm.py).
"""

from typing import Any

from swiftbox.pipelines.serve.errors import ApiError, install_handlers, model_not_found
from swiftbox.pipelines.serve.protocol import ChatCompletionRequest, CompletionRequest, now

MAX_BODY = 4 * 1024 * 1024


def build_app(backend, *, api_key: str | None = None, max_body: int = MAX_BODY):
    """`backend` offers model_names(), chat(req, raw, request), completion(req, raw, request),
    healthy() and metrics(); both are async where they talk to a model."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    from swiftbox.pipelines.serve.guard import Guard

    app = FastAPI(title="swiftbox", version="1", description="OpenAI-compatible API served by swiftbox")
    install_handlers(app)
    app.add_middleware(Guard, api_key=api_key, max_body=max_body)
    app.state.backend = backend

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

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        lines = []
        for key, value in backend.metrics().items():
            lines.append(f"# TYPE swiftbox_{key} gauge\nswiftbox_{key} {value}")
        return "\n".join(lines) + "\n"

    return app


async def _raw(request) -> dict[str, Any]:
    try:
        data = await request.json()
    except Exception:
        raise ApiError(400, "We could not parse the JSON body of your request", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data
