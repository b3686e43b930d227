"""POST /v1/completions: validated by CompletionRequest, answered by the backend (JSON or SSE)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from swiftbox.serving import fields
from swiftbox.serving.protocol import CompletionRequest, raw_body
from swiftbox.serving.routes import backend_of, check_model

router = APIRouter()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("completions", await raw_body(request), backend.name)
    return await backend.completion(body, request)
