"""GET /v1/models (the base model, then its adapters) and GET /v1/models/{model}."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from swiftbox.serving import render
from swiftbox.serving.routes import backend_of, check_model

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    return JSONResponse(render.model_list(backend_of(request).model_names()).model_dump())


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request) -> JSONResponse:
    check_model(backend_of(request), model_id)
    return JSONResponse(render.model_card(model_id).model_dump())
