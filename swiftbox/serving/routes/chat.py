"""POST /v1/chat/completions: validated by ChatCompletionRequest, answered by the backend (JSON or SSE)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from swiftbox.serving.protocol import ChatCompletionRequest
from swiftbox.serving.routes import backend_of, check_model

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat(body: ChatCompletionRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    return await backend.chat(body, request)
