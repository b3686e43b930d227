"""POST /v1/chat/completions and POST /v1/completions.

Chat: validated by ChatCompletionRequest (chat_template_kwargs against its allow-list), the fields this engine does
not implement refused (fields.py), a client's own chat template refused unless the server trusts them
(template_kwargs.py), answered by the backend (JSON or SSE). Completions: validated by CompletionRequest, answered
by the backend (JSON or SSE)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from swiftbox.serving import fields
from swiftbox.serving.openai.protocol import ChatCompletionRequest, CompletionRequest
from swiftbox.serving.protocol import raw_body
from swiftbox.serving.routes import backend_of, check_model
from swiftbox.serving.template_kwargs import check_trusted

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat(body: ChatCompletionRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("chat", await raw_body(request), backend.name)
    check_trusted(body.chat_template, body.chat_template_kwargs, backend.trust_request_chat_template)
    return await backend.chat(body, request)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("completions", await raw_body(request), backend.name)
    return await backend.completion(body, request)
