"""The vLLM engine at run time: `vllm serve` as a child process on an internal port (VllmProcess), and the
`Backend` that relays validated requests to it (VllmBackend). The command itself comes from plan.py.

Clients only ever see the FastAPI app, which applies swiftbox's API key, body limit and error contract to
every route (vLLM's --api-key guards only /v1), then relays the request and streams vLLM's answer back
unchanged. Runtime adapters: the front door checks a load (adapters.py) and then forwards it to the child's
own /v1/load_lora_adapter. /metrics appends the child's `vllm:*` families.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from swiftbox.errors import SwiftboxError
from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import raw_body
from swiftbox.serving.vllm.plan import VllmPlan

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from swiftbox.serving.adapter_check import CheckedAdapter
    from swiftbox.serving.adapters import AdapterPolicy
    from swiftbox.serving.events import Event
    from swiftbox.serving.metrics import ServeMetrics
    from swiftbox.serving.openai.protocol import ChatCompletionRequest, CompletionRequest


class VllmProcess:
    """Start the planned child, wait until it is healthy, stop it (whole process group)."""

    def __init__(self, p: VllmPlan, log_path: Path):
        self.plan, self.log_path = p, log_path
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 900) -> None:
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = {**os.environ, **self.plan.env}
        from swiftbox import procs

        # its own session, and it dies with this process however that ends (swiftbox/procs.py)
        self.proc = procs.start(self.plan.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.plan.port}/health"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SwiftboxError(f"vllm serve exited with code {self.proc.returncode} while starting; "
                                    f"see {self.log_path}: {self._tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise SwiftboxError(f"vllm serve was not healthy after {timeout:.0f}s; see {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        from swiftbox import procs

        if self.proc is not None:
            procs.stop(self.proc)       # process group: SIGTERM, SIGKILL after 30 s

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(empty log)"
        except OSError:
            return "(no log)"


NATIVE = ("/v1/messages", "/v1/responses")   # vLLM's own routes for these APIs (vllm/entrypoints/anthropic, ...)


class VllmBackend:
    """Relays validated OpenAI requests to the child; streams its SSE back as it comes."""

    name = "vllm"

    def __init__(self, process: VllmProcess):
        import httpx

        self.process = process
        self.base = f"http://127.0.0.1:{process.plan.port}"
        self.client = httpx.AsyncClient(base_url=self.base, timeout=httpx.Timeout(None, connect=10),
                                        headers={"Authorization": f"Bearer {process.plan.internal_key}"})
        self.forwarded = 0
        self.names = list(process.plan.model_names)
        self.max_lora_rank = process.plan.max_lora_rank
        self.trust_request_chat_template = process.plan.trust_request_chat_template
        self.runtime_adapters: Optional[AdapterPolicy] = None  # set by open_backend where clients may load adapters
        self.observer: Optional[ServeMetrics] = None           # set by build_app; vLLM reports its own token metrics
        self._loading: set[str] = set()

    def model_names(self) -> list[str]:
        return list(self.names)

    async def healthy(self) -> bool:
        import httpx

        if not self.process.alive():
            return False
        try:
            return (await self.client.get("/health", timeout=5)).status_code == 200
        except httpx.HTTPError:
            return False

    def engine_stats(self) -> None:
        """No EngineStats: the child's own `vllm:*` families come through extra_metrics."""
        return None

    async def extra_metrics(self) -> bytes:
        """vLLM's own Prometheus families (vllm:num_requests_running, vllm:time_to_first_token_seconds, ...)."""
        import httpx

        try:
            r = await self.client.get("/metrics", timeout=5)
        except httpx.HTTPError:
            return b""
        return r.content if r.status_code == 200 else b""

    # -- runtime adapters: checked by the front door, loaded by vLLM ---------------------------
    async def load_adapter(self, name: str, adapter: CheckedAdapter) -> None:
        path = str(adapter.path)
        if name in self.names or name in self._loading:
            raise ApiError(400, f"The lora adapter '{name}' has already been loaded", param="lora_name",
                           code="adapter_exists")
        self._loading.add(name)
        try:
            await self._child_call("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            self.names.append(name)
        finally:
            self._loading.discard(name)

    async def unload_adapter(self, name: str) -> None:
        if name not in self.names[1:]:
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.", param="lora_name",
                           code="adapter_not_found")
        self.names.remove(name)   # new requests for it get 404 at the front door; vLLM finishes the running ones
        await self._child_call("/v1/unload_lora_adapter", {"lora_name": name})

    async def _child_call(self, path: str, body: dict) -> None:
        import httpx

        try:
            r = await self.client.post(path, json=body, timeout=600)
        except httpx.HTTPError as exc:
            raise ApiError(503, f"the vLLM engine is not reachable: {type(exc).__name__}", type="server_error",
                           code="engine_unavailable") from None
        if r.status_code == 200:
            return
        try:
            data = r.json()
            message = (data.get("error") or data).get("message") or r.text
        except (ValueError, AttributeError):
            message = r.text
        status = 503 if r.status_code >= 500 else (404 if r.status_code == 404 else 400)
        raise ApiError(status, f"vLLM refused it: {str(message)[:500]}", param="lora_path",
                       code="adapter_unsupported" if status == 400 else None)

    async def chat(self, req: ChatCompletionRequest, request: Request) -> Response:
        return await self._relay("/v1/chat/completions", await raw_body(request), bool(req.stream))

    async def completion(self, req: CompletionRequest, request: Request) -> Response:
        return await self._relay("/v1/completions", await raw_body(request), bool(req.stream))

    async def chat_events(self, req: ChatCompletionRequest, request: Request) -> AsyncIterator[Event]:
        """A chat request built by the front door (not sent by the client: a translated family's) relayed as a
        stream, vLLM's chunks read back into the typed events (openai/read.py); an error answer raises."""
        from swiftbox.serving.openai.read import error, events

        body = {**req.model_dump(mode="json", exclude_unset=True), "stream": True}
        answer = await self._relay("/v1/chat/completions", body, True)
        if answer.status_code != 200:
            raise error(answer.status_code, json.loads(bytes(answer.body)))
        return events(answer.body_iterator)     # type: ignore[attr-defined]

    async def native(self, path: str, request: Request, stream: bool) -> Optional[Response]:
        """vLLM serves Anthropic's /v1/messages and OpenAI's /v1/responses itself: relayed as sent (after the front
        door's key, body limit and model check). Token counting is translated (count_tokens, via /tokenize)."""
        if path in NATIVE:
            return await self._relay(path, await raw_body(request), stream)
        return None

    async def count_tokens(self, req: ChatCompletionRequest) -> int:
        import httpx

        body = {"model": req.model, "messages": [m.for_template() for m in req.messages], "tools": req.tools,
                "add_generation_prompt": True}
        try:
            r = await self.client.post("/tokenize", json=body, timeout=120)
        except httpx.HTTPError as exc:
            raise ApiError(503, f"the vLLM engine is not reachable: {type(exc).__name__}", type="server_error",
                           code="engine_unavailable") from None
        if r.status_code != 200:
            raise ApiError(400 if r.status_code < 500 else 503, f"vLLM could not count the tokens: {r.text[:500]}",
                           param="messages")
        return int(r.json()["count"])

    async def _relay(self, path: str, raw: dict[str, Any], stream: bool) -> Response:
        import httpx
        from fastapi.responses import JSONResponse, StreamingResponse

        self.forwarded += 1
        try:
            upstream = await self.client.send(self.client.build_request("POST", path, json=raw), stream=True)
        except httpx.HTTPError as exc:
            raise ApiError(503, f"the vLLM engine is not reachable: {type(exc).__name__}", type="server_error",
                           code="engine_unavailable") from None
        if not stream or upstream.status_code != 200:
            body = await upstream.aread()
            await upstream.aclose()
            try:
                data = json.loads(body)
            except ValueError:
                data = {"error": {"message": body.decode(errors="replace")[:500], "type": "server_error"}}
            status = upstream.status_code
            if status >= 500:
                status = 503
            return JSONResponse(data, status_code=status)

        async def relay():
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()  # client gone: closing the upstream aborts the request in vLLM

        return StreamingResponse(relay(), media_type="text/event-stream")

    async def aclose(self) -> None:
        await self.client.aclose()

