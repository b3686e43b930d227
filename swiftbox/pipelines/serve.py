"""serve step: the OpenAI-compatible server (swiftbox/serving/) as a step - check (exposure, engine, the
pre-deploy gate: all refusals, before any output exists), then open the planned engine and serve.

    ./launch.sh serve MODEL [--adapters name=path ...] [--engine auto|builtin|vllm] [--port 0] [--smoke]
                      [--adapter-root DIR ...] [--no-runtime-adapters] [--metrics-public]

`run(cfg, ctx)` blocks until Ctrl-C/SIGTERM, or with `smoke: true` starts on a free port, asks one
question through the official openai client, checks the answer and stops. Everything it runs lives in
swiftbox/serving/ (the map is that package's docstring); this module only orders the steps.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from swiftbox.contract import Plan, StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.serving.launch import Names, api_key, check_exposure, choose_engine, open_backend
from swiftbox.steps import ServeStep

if TYPE_CHECKING:
    from swiftbox.serving.backend import Backend


@dataclass(frozen=True, kw_only=True)
class ServePlan(Plan):
    """What check decided for this input: the engine (picked once, and the pre-deploy gate passed for it) and the
    API key clients must send (read once; never printed)."""

    engine: str
    api_key: Optional[str] = field(default=None, repr=False)
    choice: dict = field(default_factory=dict)   # the engine choice and the figures it read (the step's metrics)


def plan_engine(cfg: ServeStep, platform: Platform, input: str, notes: list[str],
                choice: Optional[dict] = None) -> str:
    """The engine for `input` on this platform, after the pre-deploy gate (files + engine fit: refuse, exit 2/3,
    rather than serve what cannot load). The serve and chat steps' check call it; the choice goes to `notes` (an
    `auto` choice with its reason) and, as metrics, into `choice`."""
    from swiftbox.verify import startup_gate

    picked = choose_engine(cfg, platform, input)
    if cfg.engine == "auto":
        notes.append(picked.line())
    if choice is not None:
        choice.update(picked.metrics())
    engine = picked.engine
    if engine == "builtin" and cfg.devices is not None and cfg.devices.resolve() != [0]:
        raise UserError(f"devices: the built-in engine runs on one device (the first visible one), not "
                        f"{cfg.devices}; use engine: vllm for tensor parallel, or devices: 1")
    startup_gate(input, engine, platform)
    return engine


def check(cfg: ServeStep, platform: Platform, input: str) -> ServePlan:
    """Every refusal before the output exists: exposure without a key, the engine (and devices) for this platform,
    the pre-deploy gate on the input for that engine."""
    notes: list[str] = []
    key = api_key(cfg)
    check_exposure(cfg, key, notes.append)   # a refusal costs nothing here; the warning is one of the plan's notes
    choice: dict = {}
    engine = plan_engine(cfg, platform, input, notes, choice)
    return ServePlan(engine=engine, api_key=key, notes=tuple(notes), choice=choice)


def open_planned(cfg: ServeStep, ref: str, engine: str, platform: Platform, *, work_dir: Path,
                 log: Callable[[str], None]) -> tuple[Backend, Names, Callable[[], None]]:
    """The engine check planned for `ref`, opened (the serve and chat steps' run)."""
    return open_backend(cfg, ref, platform, work_dir=work_dir, log=log, engine=engine)


def run(cfg: ServeStep, ctx: StepContext) -> StepResult:
    from swiftbox.serving.app import build_app

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    plan = ctx.plan_as(ServePlan)
    key = plan.api_key
    backend, names, close = open_planned(cfg, str(ctx.input), plan.engine, ctx.platform, work_dir=ctx.work_dir,
                                         log=log)
    try:
        app = build_app(backend, api_key=key, metrics_public=cfg.metrics_public)
        info = {"engine": backend.name, "models": backend.model_names()}
        if cfg.smoke:
            from swiftbox.serving.smoke import smoke

            metrics = smoke(app, host=cfg.host, port=cfg.port, api_key=key, model=names.primary, log=log,
                            question=cfg.smoke_prompt)
            return StepResult(metrics={**metrics, **plan.choice, "engine": backend.name}, info=info)
        from swiftbox.serving.server import serve_forever

        serve_forever(app, cfg.host, cfg.port, log=log)
        return StepResult(metrics={**plan.choice, "engine": backend.name, "stopped": True}, info=info)
    finally:
        close()


PIPELINE = declare("serve", ServeStep, produces_model=False, check=check, run=run)
