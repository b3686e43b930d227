"""Runs a recipe: each step gets its input (the previous model artifact) and goes through one lifecycle,
`_run_step`: plan (the pipeline's check: every refusal against the platform and the input, and what it resolved -
dtypes, adapter chain, engine; nothing on disk yet) -> placement (one process here, or torchrun workers for a
pipeline declared `distributed`) -> prepare `<out>.partial` -> run (reads `ctx.plan`) -> manifest (its `dtype` from
the plan, written here only) -> commit (rename). Ends with runs/<name>/summary.json.

A failure leaves no debris: a work dir the step left empty is removed, and a failed one-step command
(`./launch.sh sft ...`) writes no summary (a recipe's summary records the failed step). Training
checkpoints are deleted only after the output is committed, so a kill at any moment can still resume.
"""
from __future__ import annotations

import platform as _py_platform
import shutil
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from swiftbox import disk, logs
from swiftbox.artifacts import (
    MANIFEST,
    check_summary_replaceable,
    commit_output,
    discard_empty_work,
    partial_dir,
    prepare_output,
    write_json_atomic,
)
from swiftbox.contract import StepContext, StepResult
from swiftbox.device import Platform, current_platform
from swiftbox.diagnose.fingerprint import step_fingerprint
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines import load_pipeline
from swiftbox.recipe import Recipe, Step, load_recipe
from swiftbox.steps import StepBase
from swiftbox.versions import package_versions

if TYPE_CHECKING:
    from swiftbox.contract import Pipeline
    from swiftbox.device.devices import Devices
    from swiftbox.training.distributed.launch import LaunchPlan

REDACTED_KEYS = {"api_key"}
CHECKPOINTS = "checkpoints"     # training steps keep theirs under <output>.partial/checkpoints
LOG_FILE = "swiftbox.log"      # the libraries' warnings and banners (see swiftbox.logs)
MANIFEST_PACKAGES = ("swiftbox", "torch", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "gptqmodel",
                     "torch_npu", "vllm")


def _config_for_manifest(cfg: StepBase) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    for key in REDACTED_KEYS & data.keys():
        if data[key]:
            data[key] = "***"
    return data


def run_recipe(recipe: Union[str, Path, dict, Recipe], overrides: Iterable[str] = (), *,
               runs_root: Union[str, Path, None] = None, log: Optional[Callable[[str], None]] = None,
               summary_on_failure: bool = True) -> dict:
    """Run every step of `recipe`; returns the summary (also written to runs/<name>/summary.json)."""
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    log = log or _stderr
    platform = current_platform(recipe.header.device)
    root = Path(recipe.header.output_dir or Path(runs_root or "runs") / recipe.name)
    check_summary_replaceable(root / "summary.json")       # before anything is written there
    logs.attach(root / LOG_FILE)
    logs.quiet_gptqmodel()
    logs.quiet_progress_bars()
    summary: dict[str, Any] = {"recipe": recipe.name, "source": recipe.source, "device": platform.name,
                               "started": _now(), "steps": []}
    current = recipe.header.model
    used: dict[str, int] = {}
    models: dict[str, str] = {}     # "@sft", "@sft-2": the model outputs of earlier steps, for a step's model:
    for step in recipe.steps:
        used[step.kind] = used.get(step.kind, 0) + 1
        name = step.kind if used[step.kind] == 1 else f"{step.kind}-{used[step.kind]}"
        default_out = root / name
        entry: dict[str, Any] = {"step": step.kind, "output": None, "ok": False, "metrics": {}}
        summary["steps"].append(entry)
        try:
            out, produces, metrics = _run_step(recipe, step, current, default_out, platform, log, models)
            entry.update(output=str(out), ok=True, metrics=metrics)
            if produces:
                current = str(out)
                models["@" + name] = str(out)
        except BaseException as exc:
            entry["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            summary["finished"] = _now()
            discard_empty_work(partial_dir(Path(step.config.output) if step.config.output else default_out))
            try:
                if summary_on_failure or any(e["ok"] for e in summary["steps"]):
                    write_json_atomic(root / "summary.json", summary)
                else:
                    _drop_empty(root)
            except OSError:        # a full disk: the step's own error is the one to report
                pass
            raise
        write_json_atomic(root / "summary.json", summary)
    summary["finished"] = _now()
    summary["summary_path"] = str(root / "summary.json")
    write_json_atomic(root / "summary.json", summary)
    return summary



def _earlier_model(step: Step, models: dict[str, str]) -> Optional[str]:
    """The step's own model:, where `@sft` (`@sft-2` for the second sft, ...) names an earlier step's model output
    in this recipe, wherever --runs-root or output: put it."""
    return _earlier_ref(step.config.model, step, models)


def _earlier_ref(ref: Optional[str], step: Step, models: dict[str, str]) -> Optional[str]:
    if not ref or not ref.startswith("@"):
        return ref
    if ref not in models:
        known = ", ".join(models) or "none yet"
        raise UserError(f"steps[{step.index}].{step.kind}.model {ref}: no earlier step of this recipe produced a "
                        f"model under that name (earlier model outputs: {known})")
    return models[ref]

def _run_step(recipe: Recipe, step: Step, current: Optional[str], default_out: Path, platform: Platform,
              log: Callable[[str], None], models: dict[str, str]) -> tuple[Path, bool, dict[str, Any]]:
    """check -> placement -> prepare output -> run (here, or on the launched workers) -> manifest -> commit."""
    cfg = step.config
    pipeline = load_pipeline(step.kind)
    model_ref = _earlier_model(step, models) or current
    if model_ref is None and pipeline.needs_input:
        raise UserError(f"steps[{step.index}].{step.kind}: no input model: set the recipe's model: or the step's "
                        "model:")
    compare = getattr(cfg, "compare", None)
    if compare:                                         # eval's other models may name earlier steps too (@sft)
        cfg = cfg.model_copy(update={"compare": [_earlier_ref(r, step, models) for r in compare]})
    output = Path(cfg.output) if cfg.output else default_out
    ctx = StepContext(recipe=recipe.name, kind=step.kind, index=step.index, input=model_ref or "",
                      work_dir=partial_dir(output), output=output, platform=platform,
                      header_devices=recipe.header.devices)
    plan = pipeline.plan(cfg, ctx)     # every refusal (exit 2/3) while nothing is on disk; what run will read
    launch = _placement(pipeline, cfg, platform, recipe.header.devices, ctx.work_dir)
    ctx.plan = replace(plan, placement=launch)
    if len(recipe.steps) > 1:  # a one-step command stays quiet, so bad input reads as exactly one line
        described = f"; {ctx.plan.describe()}" if ctx.plan.describe() else ""
        log(f"[{step.index + 1}/{len(recipe.steps)}] {step.kind} <- {model_ref}  (device {platform.name}{described})")
    for note in plan.notes:
        log(note)
    work = prepare_output(output, force=cfg.force, resume=bool(getattr(cfg, "resume", False)),
                          owned=cfg.output is None)
    if work != ctx.work_dir:
        raise SwiftboxError(f"runner: the work dir is {work}, planned as {ctx.work_dir}")
    started = time.time()
    try:
        result = pipeline.execute(cfg, ctx) if launch is None else _on_workers(launch, pipeline, cfg, ctx)
        manifest = _manifest(recipe, step, ctx, result, started)
        write_json_atomic(work / MANIFEST, manifest)
        commit_output(work, output)
    except SwiftboxError:
        raise
    except Exception as exc:
        if not disk.no_space(exc, work):
            raise
        raise _full_disk(exc, cfg, work, output) from None
    shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)   # only now: until the commit they allow a resume
    log(f"      -> {output}  {_fmt_metrics(result.metrics)}")
    return output, pipeline.produces_model, result.metrics


def _placement(pipeline: Pipeline[Any], cfg: StepBase, platform: Platform, header_devices: Optional[Devices],
               work: Path) -> Optional[LaunchPlan]:
    """Where the step runs: None for this process; a torchrun plan when a pipeline declared `distributed` needs
    more than one process or another device (the launch refusals are raised here, before `<out>.partial`)."""
    if not pipeline.distributed:
        return None
    from swiftbox.training.distributed.launch import plan_for

    return plan_for(cfg, platform, header_devices, work)


def _on_workers(plan: LaunchPlan, pipeline: Pipeline[Any], cfg: StepBase, ctx: StepContext) -> StepResult:
    """Every worker runs the pipeline's `execute`; rank 0's StepResult comes back through the work dir."""
    from swiftbox.steps import TrainBase
    from swiftbox.training.distributed.launch import run_workers

    if not isinstance(cfg, TrainBase):
        raise TypeError(f"pipeline {pipeline.kind}: distributed with a {type(cfg).__name__} schema")
    return run_workers(plan, pipeline.module, cfg, ctx)


def _full_disk(exc: Exception, cfg: StepBase, work: Path, output: Path) -> SwiftboxError:
    """The disk filled while the step wrote: one line, nothing committed. A training step keeps its checkpoints
    (resume: true continues from them); any other step frees what it half wrote."""
    if hasattr(cfg, "resume"):
        note = f"nothing was committed; {disk.shown(work)} keeps the checkpoints: free space, then re-run with --resume"
    else:
        shutil.rmtree(work, ignore_errors=True)
        note = f"nothing was committed to {disk.shown(output)}"
    return disk.full_disk_error(exc, work, note)


def _manifest(recipe: Recipe, step: Step, ctx: StepContext, result: StepResult, started: float) -> dict[str, Any]:
    """The run manifest. Its `dtype` and `dtype_plan` come from the plan and are written here alone (after the
    step's own `info`, so a step cannot write a second `dtype`)."""
    plan = ctx.plan
    dtypes = plan.dtypes if plan is not None else None
    return {
        "swiftbox_manifest": 1,
        "kind": step.kind,
        "recipe": recipe.name,
        "input": ctx.input or None,
        "config": _config_for_manifest(step.config),
        "device": ctx.platform.name,
        "device_name": _safe(ctx.platform.device_name),
        "versions": {"python": _py_platform.python_version(), **package_versions(MANIFEST_PACKAGES)},
        "timings": {"started": datetime.fromtimestamp(started, timezone.utc).isoformat(),
                    "seconds": round(time.time() - started, 3)},
        "metrics": result.metrics,
        **step_fingerprint(step.config, ctx.input or None),   # data / weight hashes, seeds, env: for `compare`
        **result.info,
        "dtype": plan.dtype if plan is not None else None,
        **({"dtype_plan": dtypes.as_dict()} if dtypes is not None else {}),
    }


def run_step(kind: str, config: dict, *, runs_root: Union[str, Path, None] = None, device: Optional[str] = None,
             log: Optional[Callable[[str], None]] = None) -> dict:
    """One step as a one-step recipe (what `./launch.sh sft ...` and `swiftbox.sft(...)` do)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    recipe = {"name": f"{kind}-{stamp}", "device": device or "auto", "steps": [{kind: config}]}
    summary = run_recipe(recipe, runs_root=runs_root, log=log, summary_on_failure=False)
    return summary["steps"][0]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _drop_empty(path: Path) -> None:
    """Remove `path` if it is an empty directory (a failed step's work dir)."""
    try:
        path.rmdir()
    except OSError:
        pass


def _safe(fn: Callable[[], object]) -> str:
    try:
        return str(fn())
    except Exception:
        return "unknown"


def _fmt_metrics(metrics: dict[str, Any]) -> str:
    parts = []
    for k, v in list(metrics.items())[:6]:
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


__all__ = ["run_recipe", "run_step"]
