"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API): validated by MessagesRequest,
translated onto the chat request (translate.to_chat) and answered by the backend's chat path; the answer is
shaped back by responses.MessagesBuilder. Errors on these paths are in Anthropic's shape (errors.py). An engine
with its own /v1/messages (vLLM) is handed the request as sent (Backend.native)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from swiftbox.serving import fields, translate
from swiftbox.serving.protocol import CountTokensRequest, MessagesRequest, raw_body
from swiftbox.serving.responses import MessagesBuilder
from swiftbox.serving.routes import backend_of, check_model, event_stream

router = APIRouter()


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("messages", await raw_body(request), backend.name)
    relayed = await backend.native("/v1/messages", request, body.stream)
    if relayed is not None:
        return relayed
    chat = translate.to_chat(body)
    bodies = MessagesBuilder(body.model)
    answer = await backend.chat(chat, request)
    if not body.stream:
        if answer.status_code == 499:        # the client went away
            return answer
        return JSONResponse(bodies.message(*translate.whole(answer)))
    return StreamingResponse(event_stream(bodies, answer), media_type="text/event-stream",
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
