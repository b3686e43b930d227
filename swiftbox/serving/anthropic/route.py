"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API): validated by MessagesRequest,
translated onto the chat request (translate.to_chat) and answered by the backend's chat path; the answer is shaped
back by render.MessagesBuilder from the typed engine events (events.py: rendered as they stream, or gathered
whole). Errors on these paths are in Anthropic's shape (errors.py). An engine with its own /v1/messages (vLLM) is
handed the request as sent (Backend.native)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from swiftbox.serving import fields
from swiftbox.serving.answer import gathered
from swiftbox.serving.anthropic import translate
from swiftbox.serving.anthropic.protocol import CountTokensRequest, MessagesRequest
from swiftbox.serving.anthropic.render import MessagesBuilder
from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import raw_body
from swiftbox.serving.render import rendered
from swiftbox.serving.routes import backend_of, check_model

router = APIRouter()


def prefilled(messages: list[dict[str, Any]]) -> bool:
    """Whether the conversation ends with an assistant turn that has text to continue (a prefill)."""
    last = messages[-1] if messages else {}
    content = last.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    text = any(isinstance(b, dict) and b.get("type") == "text" and b.get("text") for b in blocks)
    calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
    return last.get("role") == "assistant" and text and not calls


def check_prefill(backend: Any, body: MessagesRequest) -> None:
    """vLLM's own /v1/messages renders a last assistant turn as a finished one (it does not continue it): refused
    there rather than answered as something else; the built-in engine continues it (translate.to_chat)."""
    if backend.name == "vllm" and prefilled(body.messages):
        raise ApiError(400, "messages: a last assistant turn (prefill) is not continued by the vLLM engine's "
                            "/v1/messages; use the built-in engine, or the chat route with continue_final_message",
                       param="messages", code="unsupported_field")


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("messages", await raw_body(request), backend.name)
    check_prefill(backend, body)
    relayed = await backend.native("/v1/messages", request, body.stream)
    if relayed is not None:
        return relayed
    chat = translate.to_chat(body)
    bodies = MessagesBuilder(body.model)
    events = await backend.chat_events(chat, request)
    if not body.stream:
        found = await gathered(events, request)
        if found is None:        # the client went away
            return Response(status_code=499)
        return JSONResponse(bodies.message(*found))
    return StreamingResponse(rendered(bodies, events), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("messages", await raw_body(request), backend.name)
    relayed = await backend.native("/v1/messages/count_tokens", request, False)
    if relayed is not None:
        return relayed
    tokens = await backend.count_tokens(translate.to_chat(body, stream=False))
    return JSONResponse(MessagesBuilder(body.model).count(tokens))
