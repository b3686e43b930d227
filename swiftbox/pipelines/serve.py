"""serve step: the OpenAI-compatible server (swiftbox/serving/) as a step - check, gate, open, serve.

    ./launch.sh serve MODEL [--adapters name=path ...] [--engine auto|builtin|vllm] [--port 0] [--smoke]
                      [--adapter-root DIR ...] [--no-runtime-adapters] [--metrics-public]

`run(cfg, ctx)` blocks until Ctrl-C/SIGTERM, or with `smoke: true` starts on a free port, asks one
question through the official openai client, checks the answer and stops. Everything it runs lives in
swiftbox/serving/ (the map is that package's docstring); this module only orders the steps.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.serving.launch import Names, api_key, check_exposure, open_backend, pick_engine
from swiftbox.steps import ServeStep

if TYPE_CHECKING:
    from swiftbox.serving.backend import Backend


def check(cfg: ServeStep, platform: Platform, input: str) -> None:
    check_exposure(cfg, api_key(cfg), lambda msg: None)   # the warning itself is printed by run()
    if cfg.engine == "vllm":
        platform.require("vllm")
    if cfg.engine == "builtin" and cfg.devices is not None and cfg.devices.resolve() != [0]:
        raise UserError(f"devices: the built-in engine runs on one device (the first visible one), not "
                        f"{cfg.devices}; use engine: vllm for tensor parallel, or devices: 1")


def open_checked(cfg: ServeStep, ref: str, platform: Platform, *, work_dir: Path,
                 log: Callable[[str], None]) -> tuple[Backend, Names, Callable[[], None]]:
    """The engine for `ref`, after the pre-deploy gate (files + engine fit: refuse, exit 2/3, rather than
    serve what cannot load). The serve and chat steps open their engine through this."""
    from swiftbox.verify import startup_gate

    engine = pick_engine(cfg, platform, log)
    startup_gate(ref, engine, platform)
    return open_backend(cfg, ref, platform, work_dir=work_dir, log=log, engine=engine)


def run(cfg: ServeStep, ctx: StepContext) -> StepResult:
    from swiftbox.serving.app import build_app

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    key = api_key(cfg)
    check_exposure(cfg, key, log)      # before the model loads: a refusal costs nothing
    backend, names, close = open_checked(cfg, str(ctx.input), ctx.platform, work_dir=ctx.work_dir, log=log)
    try:
        app = build_app(backend, api_key=key, metrics_public=cfg.metrics_public)
        info = {"engine": backend.name, "models": backend.model_names()}
        if cfg.smoke:
            from swiftbox.serving.smoke import smoke

            metrics = smoke(app, host=cfg.host, port=cfg.port, api_key=key, model=names.primary, log=log,
                            question=cfg.smoke_prompt)
            return StepResult(metrics={**metrics, "engine": backend.name}, info=info)
        from swiftbox.serving.server import serve_forever

        serve_forever(app, cfg.host, cfg.port, log=log)
        return StepResult(metrics={"engine": backend.name, "stopped": True}, info=info)
    finally:
        close()


PIPELINE = declare("serve", ServeStep, produces_model=False, check=check, run=run)
