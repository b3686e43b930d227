"""One torchrun worker: `python -m swiftbox.training.distributed.worker <work_dir>/launch.json`.

torchrun starts this once per rank with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR set. It rebuilds the
step's config and context from the spec the runner's launcher wrote (launch.run_workers), imports the module
that declared the pipeline and calls its `PIPELINE.execute(cfg, ctx)` - the same call the runner makes for one
process; training proceeds under accelerate / transformers' distributed support. The step's `check` ran once,
in the launcher, and is not repeated here: `ctx.plan` is the runner's (its dtypes, from launch.json).
Rank 0 hands its StepResult back to the launcher in the work dir.
A failure prints one marked line naming the rank, then exits with the error's exit code, so the
launcher can report it as one line.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from swiftbox.contract import Plan, StepContext, StepResult
from swiftbox.errors import SwiftboxError
from swiftbox.steps import StepBase
from swiftbox.training.distributed.launch import RESULT_FILE, worker_mark
from swiftbox.training.distributed.ranks import is_main_process, rank


def load_spec(path: str) -> dict:
    spec = json.loads(Path(path).read_text())
    if spec.get("swiftbox_launch") != 1:
        raise SwiftboxError(f"{path}: not a swiftbox launch spec")
    return spec


def build(spec: dict) -> tuple[StepBase, StepContext]:
    """The validated config and the StepContext the launcher had, rebuilt in this process."""
    from swiftbox.device import current_platform, parse_devices
    from swiftbox.steps import STEP_TYPES

    schema = STEP_TYPES[spec["kind"]]
    config = spec["config"]
    cfg = schema.model_validate({k: config[k] for k in spec.get("fields_set", config)})
    ctx = StepContext(recipe=spec["recipe"], kind=spec["kind"], index=spec["index"], input=spec["input"],
                      work_dir=Path(spec["work_dir"]), output=Path(spec["output"]),
                      platform=current_platform(spec["device"]),
                      header_devices=parse_devices(spec.get("header_devices")), plan=_plan(spec.get("plan") or {}))
    return cfg, ctx


def _plan(fields: dict) -> Plan:
    """The runner's plan as launch.plan_fields wrote it (its dtypes and the manifest dtype)."""
    from swiftbox.device.dtype_policy import DtypePlan

    dtypes = fields.get("dtypes")
    return Plan(dtypes=DtypePlan(**dtypes) if dtypes else None, dtype=fields.get("dtype"))


def run_spec(spec: dict) -> StepResult:
    cfg, ctx = build(spec)
    pipeline = importlib.import_module(spec["pipeline"]).PIPELINE
    result = pipeline.execute(cfg, ctx)
    if is_main_process():
        from swiftbox.artifacts import write_json_atomic

        write_json_atomic(ctx.work_dir / RESULT_FILE, {"metrics": result.metrics, "info": result.info})
    return result


def main(argv: list[str]) -> int:
    spec_path = argv[0] if argv else ""
    from swiftbox import logs

    logs.setup()   # SWIFTBOX_VERBOSE travels from the launcher
    logs.quiet_gptqmodel()
    logs.quiet_progress_bars()
    try:
        run_spec(load_spec(spec_path))
    except BaseException as exc:
        failed_at = time.time()
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        exit_status = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        code = getattr(exc, "exit_code", None) or exit_status
        if not isinstance(exc, SwiftboxError):
            traceback.print_exc()
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        print(worker_mark(rank(), code, failed_at, message), file=sys.stderr, flush=True)
        return code  # no teardown: the other ranks may be waiting on us; torchrun stops them
    _shutdown()
    return 0


def _shutdown() -> None:
    """Leave the process group cleanly (accelerate/transformers created it; ignore if none)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
