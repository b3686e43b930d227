"""POST /v1/responses (OpenAI Responses API): validated by ResponsesRequest, the conversation rebuilt from
`previous_response_id` (response_store.py; 404 when unknown or evicted) plus `input`, translated onto the chat
request (translate.responses_to_chat) and answered by the backend's chat path; responses.ResponsesBuilder shapes
the Response object and its typed stream events. `store: false` answers are not kept. An engine with its own
/v1/responses (vLLM) is handed the request as sent (Backend.native)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from swiftbox.serving import translate
from swiftbox.serving.protocol import ResponsesRequest
from swiftbox.serving.response_store import ResponseStore
from swiftbox.serving.responses import ResponsesBuilder
from swiftbox.serving.routes import backend_of, check_model, event_stream

router = APIRouter()


def store_of(request: Request) -> ResponseStore:
    return request.app.state.response_store


def echo(body: ResponsesRequest) -> dict[str, Any]:
    """The request's settings as the Response object repeats them."""
    return {"instructions": body.instructions, "tools": body.tools or [], "tool_choice": body.tool_choice or "auto",
            "temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "previous_response_id": body.previous_response_id, "reasoning": body.reasoning, "store": body.store}


@router.post("/v1/responses")
async def create(body: ResponsesRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    relayed = await backend.native("/v1/responses", request, body.stream)
    if relayed is not None:
        return relayed
    store = store_of(request)
    history = store.get(body.previous_response_id)[1] if body.previous_response_id else []
    chat, convo, names = translate.responses_to_chat(body, history)
    bodies = ResponsesBuilder(body.model, echo(body), names)
    answer = await backend.chat(chat, request)

    def keep(items: list[dict[str, Any]]) -> None:
        if body.store:
            store.put(bodies.id, body.model, convo + translate.items_to_messages(items))

    if not body.stream:
        if answer.status_code == 499:        # the client went away
            return answer
        output, used = translate.whole(answer)
        result = bodies.whole(output, used)
        keep(result["output"])
        return JSONResponse(result)
    return StreamingResponse(event_stream(bodies, answer, on_end=keep), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
