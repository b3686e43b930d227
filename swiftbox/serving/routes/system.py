"""GET/HEAD /health (open to all) and GET /metrics (Prometheus; behind the key unless metrics_public)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from swiftbox.serving import render
from swiftbox.serving.metrics import CONTENT_TYPE
from swiftbox.serving.routes import backend_of, metrics_of

router = APIRouter()


@router.api_route("/health", methods=["GET", "HEAD"])
async def health(request: Request) -> JSONResponse:
    backend = backend_of(request)
    ok = await backend.healthy()
    return JSONResponse(render.health(ok, backend.name).model_dump(), status_code=200 if ok else 503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body = metrics_of(request).render() + await backend_of(request).extra_metrics()
    return Response(body, media_type=CONTENT_TYPE)
