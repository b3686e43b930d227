"""/v1/responses (OpenAI Responses API).

POST: validated by ResponsesRequest, the conversation rebuilt from `previous_response_id` (store.py; 404
when unknown or evicted) plus `input`, translated onto the chat request (translate.to_chat) and answered by
the backend's chat path; render.ResponsesBuilder shapes the Response object and its typed stream events.
`store: false` answers are not kept. An engine with its own /v1/responses (vLLM) is handed the request as sent
(Backend.native).

GET /v1/responses/{id}, DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items (cursor-paged: after,
limit, order) read the same store; an unknown id is a 404 in OpenAI's shape.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from swiftbox.serving import fields
from swiftbox.serving.answer import gathered
from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import raw_body
from swiftbox.serving.render import rendered
from swiftbox.serving.responses import translate
from swiftbox.serving.responses.protocol import ResponsesRequest
from swiftbox.serving.responses.render import ResponsesBuilder
from swiftbox.serving.responses.store import ResponseStore, Stored
from swiftbox.serving.routes import backend_of, check_model

router = APIRouter()
MAX_PAGE = 100          # OpenAI's bound on input_items' limit


def store_of(request: Request) -> ResponseStore:
    return request.app.state.response_store


def echo(body: ResponsesRequest) -> dict[str, Any]:
    """The request's settings as the Response object repeats them."""
    return {"instructions": body.instructions, "tools": body.tools or [], "tool_choice": body.tool_choice or "auto",
            "temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "previous_response_id": body.previous_response_id, "reasoning": body.reasoning, "store": body.store,
            "metadata": body.metadata or {}, "user": body.user,
            "parallel_tool_calls": body.parallel_tool_calls is not False}


@router.post("/v1/responses")
async def create(body: ResponsesRequest, request: Request) -> Response:
    backend = backend_of(request)
    check_model(backend, body.model)
    fields.screen("responses", await raw_body(request), backend.name)
    relayed = await backend.native("/v1/responses", request, body.stream)
    if relayed is not None:
        return relayed
    store = store_of(request)
    history = store.get(body.previous_response_id)[1] if body.previous_response_id else []
    chat, convo, names = translate.to_chat(body, history)
    bodies = ResponsesBuilder(body.model, echo(body), names)

    def keep(response: dict[str, Any]) -> None:
        if body.store:
            store.put(bodies.id, body.model, convo + translate.items_to_messages(response["output"]),
                      response=response, input_items=translate.input_items(body.input))

    events = await backend.chat_events(chat, request)
    if not body.stream:
        found = await gathered(events, request)
        if found is None:        # the client went away
            return Response(status_code=499)
        result = bodies.whole(*found)
        keep(result)
        return JSONResponse(result)
    return StreamingResponse(rendered(bodies, events, on_end=lambda items: keep(bodies.final)),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def stored(request: Request, response_id: str) -> Stored:
    """The stored response; on an engine that answers /v1/responses itself (vLLM) nothing is kept here, and the
    404 says so."""
    try:
        return store_of(request).entry(response_id)
    except ApiError as err:
        if backend_of(request).name == "vllm":
            err.message += ("; on the vLLM engine /v1/responses is answered by vLLM itself, which keeps no "
                            "responses here, and swiftbox keeps no copy")
        raise


@router.get("/v1/responses/{response_id}")
async def retrieve(response_id: str, request: Request) -> JSONResponse:
    found = stored(request, response_id)
    if found.response is None:
        raise ApiError(404, f"Response with id '{response_id}' not found", code="not_found")
    return JSONResponse(found.response)


@router.delete("/v1/responses/{response_id}")
async def delete(response_id: str, request: Request) -> JSONResponse:
    stored(request, response_id)
    store_of(request).delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(response_id: str, request: Request, after: Optional[str] = Query(None, max_length=256),
                      limit: int = Query(20, ge=1, le=MAX_PAGE), order: Literal["asc", "desc"] = "desc",
                      include: Optional[list[str]] = Query(None)) -> JSONResponse:
    """The request's input items, newest first unless order=asc, `limit` per page after the item `after`.
    `include` (extra fields such as image URLs) names nothing a text-only input carries: taken as a hint."""
    items = list(stored(request, response_id).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i.get("id") for i in items]
        if after not in ids:
            raise ApiError(400, f"after: no input item '{after}' in response '{response_id}'", param="after",
                           code="invalid_value")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})
