"""Helpers for the serve tests: LoRA adapters on toy that answer differently, a live server in this process, and
`python -m swiftbox serve` as a child process."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]

KEY = "test-key-123"


def make_adapter(toy_dir: Path, out: Path, seed: int) -> Path:
    """A random (non-zero) LoRA on toy: init_lora_weights=False makes B non-zero, so outputs change."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32)
    cfg = LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
                     init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(4.0)
    peft_model.save_pretrained(out)
    return out


def start_server(model_ref: str, *, adapters: dict | None = None, api_key: str | None = KEY,
                 max_model_len: int | None = 256, max_batch_size: int = 4, work_dir: Path | None = None,
                 **serve_settings):
    """(ServerThread, close) for a built-in engine server on 127.0.0.1 with a free port (`serve_settings`: more
    ServeStep fields, e.g. adapter_root, metrics_public)."""
    from swiftbox.device import current_platform
    from swiftbox.serving.app import build_app
    from swiftbox.serving.launch import open_backend
    from swiftbox.serving.server import ServerThread
    from swiftbox.steps import ServeStep

    cfg = ServeStep(engine="builtin", adapters=adapters, max_model_len=max_model_len, max_batch_size=max_batch_size,
                    api_key=api_key, **serve_settings)
    backend, names, close = open_backend(cfg, model_ref, current_platform("cpu"), work_dir=work_dir or Path("."),
                                         log=lambda m: None)
    server = ServerThread(build_app(backend, api_key=api_key, metrics_public=cfg.metrics_public)).start()

    def stop():
        server.stop()
        close()

    return server, names, stop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_process(argv: list[str], log: Path, *, key: str, ready_s: int = 300, stop_s: int = 30,
                  env: dict[str, str] | None = None) -> Iterator[str]:
    """`python -m swiftbox serve ARGV --port P` on a free loopback port, yielding its URL once /health answers
    (AssertionError with the log's tail if it exits or is not ready in `ready_s`); always stopped."""
    import httpx

    port = free_port()
    child_env = {**os.environ, "SWIFTBOX_API_KEY": key, "PYTHONPATH": str(ROOT), **(env or {})}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "swiftbox", "serve", *argv, "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=child_env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"serve not healthy in {ready_s} s: {log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
