"""verify step: the pre-deploy gate (swiftbox.verify) as a recipe step - `- verify: {}` after quantize checks
the exported model, its lineage and the served answers; it writes report.json and fails (exit 1) on any
failed check, naming them. `./launch.sh verify ARTIFACT` is the same gate with a table on the terminal.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from swiftbox.contract import Plan, StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError
from swiftbox.steps import VerifyStep


class VerifyFailed(SwiftboxError):
    """A pre-deploy check failed (exit 1)."""


@dataclass(frozen=True, kw_only=True)
class VerifyPlan(Plan):
    """The probe conversations, read once by check (None: the built-in probe)."""

    probe: Optional[list] = None


def check(cfg: VerifyStep, platform: Platform, input: str) -> VerifyPlan:
    """The gate's argument refusals (no artifact, unknown engine/dtype) and the probe file, before any output."""
    from swiftbox.verify import check_arguments, read_probe

    check_arguments(input, cfg.engine, cfg.dtype)
    return VerifyPlan(probe=read_probe(cfg.probe))


def run(cfg: VerifyStep, ctx: StepContext) -> StepResult:
    from swiftbox.verify import verify

    report = verify(str(ctx.input), engine=cfg.engine, against=cfg.against, dtype=cfg.dtype, serve=cfg.serve,
                    probe=ctx.plan_as(VerifyPlan).probe, platform=ctx.platform)
    (ctx.work_dir / "report.json").write_text(json.dumps(report.as_dict(), indent=1, default=str))
    if not report.ok:
        raise VerifyFailed(f"verify: {len(report.failures)} check(s) failed: "
                           + "; ".join(c.line() for c in report.failures[:3]))
    counts = {s: sum(c.status == s for c in report.checks) for s in ("ok", "skip")}
    return StepResult(metrics={"checks": len(report.checks), "passed": counts["ok"], "skipped": counts["skip"]},
                      info={"artifact": "report", "verify": report.as_dict()})


def dtype_plan(cfg: VerifyStep, ctx: StepContext):
    """Every link runs both sides in one dtype (swiftbox/device/dtype_policy.py): float32, or the quantized side's
    kernel dtype for a link to a GPTQ/AWQ/FP8 export."""
    from swiftbox.device import dtype_policy

    dt = dtype_policy.same_model_check(ctx.platform, cfg.dtype)
    return dtype_policy.DtypePlan(dt, check=dt, note="links to a 16-bit-kernel export run both sides in its dtype")


PIPELINE = declare("verify", VerifyStep, produces_model=False, check=check, run=run, dtypes=dtype_plan)
