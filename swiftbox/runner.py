"""Runs a recipe: each step gets its input (the previous model artifact), writes into a work dir,
and the runner adds the manifest and moves the work dir into place. Ends with runs/<name>/summary.json.

A failure leaves no debris: a work dir the step left empty is removed, and a failed one-step command
(`./launch.sh sft ...`) writes no summary (a recipe's summary records the failed step). Training checkpoints are deleted
only after the output is committed, so a kill at any moment can still resume.
"""
from __future__ import annotations

import platform as _py_platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from swiftbox.artifacts import MANIFEST, commit_output, partial_dir, prepare_output, read_manifest, write_json_atomic
from swiftbox.device import Platform, current_platform
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines import load_pipeline
from swiftbox.pipelines.base import StepContext, StepResult
from swiftbox.recipe import Recipe, Step, load_recipe

REDACTED_KEYS = {"api_key"}
CHECKPOINTS = "checkpoints"     # training steps keep theirs under <output>.partial/checkpoints


def library_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": _py_platform.python_version()}
    for pkg in ("swiftbox", "torch", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "gptqmodel",
                "torch_npu", "vllm"):
        try:
            out[pkg] = metadata.version(pkg.replace("_", "-"))
        except metadata.PackageNotFoundError:
            continue
    return out


def _config_for_manifest(cfg) -> dict:
    data = cfg.model_dump(mode="json")
    for key in REDACTED_KEYS & data.keys():
        if data[key]:
            data[key] = "***"
    return data


def run_recipe(recipe: Union[str, Path, dict, Recipe], overrides: Iterable[str] = (), *,
               runs_root: Union[str, Path, None] = None, log=None, summary_on_failure: bool = True) -> dict:
    """Run every step of `recipe`; returns the summary (also written to runs/<name>/summary.json)."""
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    platform = current_platform(recipe.header.device)
    root = Path(recipe.header.output_dir or Path(runs_root or "runs") / recipe.name)
    summary: dict[str, Any] = {"recipe": recipe.name, "source": recipe.source, "device": platform.name,
                               "started": _now(), "steps": []}
    current = recipe.header.model
    used: dict[str, int] = {}
    for step in recipe.steps:
        used[step.kind] = used.get(step.kind, 0) + 1
        default_out = root / (step.kind if used[step.kind] == 1 else f"{step.kind}-{used[step.kind]}")
        entry = {"step": step.kind, "output": None, "ok": False, "metrics": {}}
        summary["steps"].append(entry)
        try:
            out, produces, metrics = _run_step(recipe, step, current, default_out, platform, log)
            entry.update(output=str(out), ok=True, metrics=metrics)
            if produces:
                current = str(out)
        except BaseException as exc:
            entry["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            summary["finished"] = _now()
            _drop_empty(partial_dir(Path(step.config.output) if step.config.output else default_out))
            if summary_on_failure or any(e["ok"] for e in summary["steps"]):
                write_json_atomic(root / "summary.json", summary)
            else:
                _drop_empty(root)
                if not recipe.header.output_dir and runs_root is None:
                    _drop_empty(root.parent)     # runs/ itself, when this failure was all it would hold
            raise
        write_json_atomic(root / "summary.json", summary)
    summary["finished"] = _now()
    summary["summary_path"] = str(root / "summary.json")
    write_json_atomic(root / "summary.json", summary)
    return summary


def _run_step(recipe: Recipe, step: Step, current: Optional[str], default_out: Path, platform: Platform, log):
    cfg = step.config
    module = load_pipeline(step.kind)
    model_ref = cfg.model or current
    if model_ref is None and step.kind not in ("chat",):
        raise UserError(f"steps[{step.index}].{step.kind}: no input model: set the recipe's model: or the step's model:")
    output = Path(cfg.output) if cfg.output else default_out
    work = prepare_output(output, force=cfg.force, resume=bool(getattr(cfg, "resume", False)),
                          owned=cfg.output is None)
    ctx = StepContext(recipe=recipe.name, kind=step.kind, index=step.index, input=model_ref, work_dir=work,
                      output=output, platform=platform, header_devices=recipe.header.devices)
    if len(recipe.steps) > 1:  # a one-step command stays quiet, so bad input reads as exactly one line
        log(f"[{step.index + 1}/{len(recipe.steps)}] {step.kind} <- {model_ref}  (device {platform.name})")
    started = time.time()
    result = module.run(cfg, ctx)
    if isinstance(result, dict):
        result = StepResult(metrics=result)
    elif result is None:
        result = StepResult()
    manifest = {
        "swiftbox_manifest": 1,
        "kind": step.kind,
        "recipe": recipe.name,
        "input": model_ref,
        "config": _config_for_manifest(cfg),
        "device": platform.name,
        "device_name": _safe(platform.device_name),
        "dtype": getattr(cfg, "dtype", None) and ctx.dtype(getattr(cfg, "dtype")),
        "versions": library_versions(),
        "timings": {"started": datetime.fromtimestamp(started, timezone.utc).isoformat(),
                    "seconds": round(time.time() - started, 3)},
        "metrics": result.metrics,
        **result.info,
    }
    write_json_atomic(work / MANIFEST, manifest)
    commit_output(work, output)
    shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)   # only now: until the commit they allow a resume
    log(f"      -> {output}  {_fmt_metrics(result.metrics)}")
    return output, bool(getattr(module, "PRODUCES_MODEL", False)), result.metrics


def run_step(kind: str, config: dict, *, runs_root=None, device: Optional[str] = None, log=None) -> dict:
    """One step as a one-step recipe (what `./launch.sh sft ...` and `swiftbox.sft(...)` do)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    recipe = {"name": f"{kind}-{stamp}", "device": device or "auto", "steps": [{kind: config}]}
    summary = run_recipe(recipe, runs_root=runs_root, log=log, summary_on_failure=False)
    return summary["steps"][0]


def _drop_empty(path: Path) -> None:
    """Remove `path` if it is an empty directory (a failed step's work dir, a recipe root with nothing in it)."""
    try:
        path.rmdir()
    except OSError:
        pass


def _safe(fn) -> str:
    try:
        return str(fn())
    except Exception:
        return "unknown"


def _fmt_metrics(metrics: dict) -> str:
    parts = []
    for k, v in list(metrics.items())[:6]:
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


__all__ = ["StepContext", "StepResult", "run_recipe", "run_step", "SwiftboxError"]
