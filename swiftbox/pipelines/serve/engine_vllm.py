"""The vLLM engine: `vllm serve` as a child process on an internal port, behind swiftbox's front door.

`plan()` turns the step config and the platform into the exact command and environment (unit-tested
on CPU; a `vllm`-marked test parses it with vLLM's own argument parser). On an Ascend NPU the same
`vllm serve` runs with vllm-ascend installed (it plugs into vLLM as a platform plugin); the platform's
env_for() adds what it needs (VLLM_WORKER_MULTIPROC_METHOD=spawn, visible devices).

The child listens on 127.0.0.1 with a random internal key; clients only ever see the FastAPI app,
which applies swiftbox's API key, body limit and error contract to every route (vLLM's --api-key
guards only /v1), then relays the request and streams vLLM's answer back unchanged.

Runtime adapters: with them on, the child starts in vLLM's runtime LoRA updating mode
(VLLM_ALLOW_RUNTIME_LORA_UPDATING, --enable-lora, --max-loras, --max-lora-rank); the front door checks a
load (adapters.py) and then forwards it to the child's own /v1/load_lora_adapter. /metrics appends the
child's `vllm:*` families.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from swiftbox.errors import SwiftboxError
from swiftbox.pipelines.serve.errors import ApiError
from swiftbox.steps import DTYPE_NAMES

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
RUNTIME_LORA_RANK = 64          # default --max-lora-rank when clients may load adapters later
RUNTIME_MAX_LORAS = 4
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


@dataclass
class VllmPlan:
    argv: list[str]
    env: dict[str, str]             # only what swiftbox adds; the child gets os.environ + this
    port: int
    internal_key: str
    model_names: list[str]
    package: str = "vllm"
    notes: list[str] = field(default_factory=list)
    max_lora_rank: Optional[int] = None
    runtime_adapters: bool = False


def vllm_executable() -> list[str]:
    beside = Path(sys.executable).with_name("vllm")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("vllm")
    return [found] if found else [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def lora_rank(adapter_dir: str) -> Optional[int]:
    try:
        return int(json.loads((Path(adapter_dir) / "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


KEY_ENV = "VLLM_API_KEY"


def plan(cfg, platform, *, model_path: str, base_name: str, loras: dict[str, str], dtype: str, port: int,
         internal_key: Optional[str] = None, executable: Optional[list[str]] = None,
         preset=None) -> VllmPlan:
    """The `vllm serve` command line and env for this config on this platform (pure: starts nothing)."""
    key = internal_key or secrets.token_urlsafe(24)
    tp = cfg.devices.n if cfg.devices else 1     # tensor parallel over every device of `devices`
    argv = [*(executable or vllm_executable()), "serve", str(model_path),
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", base_name,
            "--dtype", dtype if dtype in DTYPE_NAMES else "auto",
            "--tensor-parallel-size", str(tp)]
    if cfg.max_model_len:
        argv += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.trust_remote_code:
        argv.append("--trust-remote-code")
    if "max_batch_size" in cfg.model_fields_set:  # only when asked: vLLM's own default suits a GPU far better
        argv += ["--max-num-seqs", str(cfg.max_batch_size)]
    if cfg.quantization == "bnb-4bit":
        argv += ["--quantization", "bitsandbytes"]
    if preset is not None:          # tool calls / reasoning parsed by vLLM in the preset family's format
        argv += preset.vllm_flags()
    notes = []
    from swiftbox.pipelines.serve.adapters import runtime_enabled

    runtime = runtime_enabled(cfg, "vllm", bool(loras))
    max_rank = None
    if loras or runtime:
        max_loras = cfg.max_loras or (max(len(loras), RUNTIME_MAX_LORAS) if runtime else len(loras))
        argv += ["--enable-lora", "--max-loras", str(max_loras)]
        if loras:
            argv += ["--lora-modules", *[f"{name}={path}" for name, path in loras.items()]]
        need = max([r for r in (lora_rank(p) for p in loras.values()) if r], default=0)
        want = max(need, cfg.max_lora_rank or (RUNTIME_LORA_RANK if runtime else 0))
        if want:
            max_rank = next((r for r in LORA_RANKS if r >= want), want)
            argv += ["--max-lora-rank", str(max_rank)]
    # the child's key travels in its environment (vLLM reads VLLM_API_KEY), never on argv where `ps` shows it
    env = {**platform.env_for(cfg.devices), KEY_ENV: key}
    if runtime:
        env[RUNTIME_ENV] = "True"
    if platform.vllm_package != "vllm":
        notes.append(f"vLLM runs with the {platform.vllm_package} platform plugin")
    return VllmPlan(argv=argv, env=env, port=port, internal_key=key, model_names=[base_name, *loras],
                    package=platform.vllm_package, notes=notes, max_lora_rank=max_rank, runtime_adapters=runtime)


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
        self.proc = subprocess.Popen(self.plan.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
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
        if self.proc is None or not self.alive():
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(empty log)"
        except OSError:
            return "(no log)"


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
        self.runtime_adapters = None    # an AdapterPolicy where clients may load adapters (set by open_backend)
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

    async def extra_metrics(self) -> bytes:
        """vLLM's own Prometheus families (vllm:num_requests_running, vllm:time_to_first_token_seconds, ...)."""
        import httpx

        try:
            r = await self.client.get("/metrics", timeout=5)
        except httpx.HTTPError:
            return b""
        return r.content if r.status_code == 200 else b""

    # -- runtime adapters: checked by the front door, loaded by vLLM ---------------------------
    async def load_adapter(self, name: str, path: str) -> None:
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

    async def chat(self, req, raw, request):
        return await self._relay("/v1/chat/completions", raw, bool(req.stream))

    async def completion(self, req, raw, request):
        return await self._relay("/v1/completions", raw, bool(req.stream))

    async def _relay(self, path: str, raw: dict, stream: bool):
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

