"""POST /v1/load_lora_adapter {lora_name, lora_path} and POST /v1/unload_lora_adapter {lora_name}, in vLLM's
shape: 200 with a plain-text "Success: ..." line; errors as OpenAI error JSON. Behind the API key like every
route but /health. The checks are AdapterPolicy's (adapters.py, adapter_check.py); the loading is the backend's.
Loads go one at a time (the policy's `loading` lock), so its count and memory caps hold under concurrent loads."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from swiftbox.serving.adapters import AdapterPolicy, refused
from swiftbox.serving.backend import Backend
from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import LoadLoraAdapterRequest, UnloadLoraAdapterRequest
from swiftbox.serving.routes import backend_of, metrics_of

router = APIRouter()


def policy(backend: Backend) -> AdapterPolicy:
    found = backend.runtime_adapters
    if found is None:
        raise ApiError(403, "runtime adapters are off on this server; start it with --runtime-adapters",
                       type="permission_error", code="runtime_adapters_disabled")
    return found


@router.post("/v1/load_lora_adapter", response_class=PlainTextResponse)
async def load_lora_adapter(body: LoadLoraAdapterRequest, request: Request) -> PlainTextResponse:
    backend = backend_of(request)
    ok = False
    try:
        rules = policy(backend)
        if body.lora_name in backend.model_names():
            raise refused(400, f"The lora adapter '{body.lora_name}' has already been loaded (or is the base "
                               "model's name); unload it first or choose another lora_name", "adapter_exists",
                          param="lora_name")
        async with rules.loading:
            checked = await asyncio.to_thread(rules.inspect, body.lora_name, body.lora_path)
            await backend.load_adapter(body.lora_name, checked)
            rules.admitted(body.lora_name, checked)
        ok = True
    finally:
        metrics_of(request).adapter_op("load", ok)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")


@router.post("/v1/unload_lora_adapter", response_class=PlainTextResponse)
async def unload_lora_adapter(body: UnloadLoraAdapterRequest, request: Request) -> PlainTextResponse:
    backend = backend_of(request)
    ok = False
    try:
        rules = policy(backend)
        names = backend.model_names()
        if names and body.lora_name == names[0]:
            raise refused(400, f"'{body.lora_name}' is the base model, not an adapter", "not_an_adapter",
                          param="lora_name")
        if body.lora_name not in names:
            raise refused(404, f"The lora adapter '{body.lora_name}' cannot be found.", "adapter_not_found",
                          param="lora_name")
        await backend.unload_adapter(body.lora_name)
        rules.released(body.lora_name)
        ok = True
    finally:
        metrics_of(request).adapter_op("unload", ok)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")
