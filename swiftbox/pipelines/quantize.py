"""quantize step: GPTQ / AWQ (gptqmodel), bitsandbytes NF4 / int8 and FP8 (transformers) exports, and GGUF
(llama.cpp / Ollama, with the `gguf` extra), each proven with numbers and gated (past a tolerance the step fails,
exit 1, and nothing is written).

This module only orders the step: `check` refuses (device, then the input by the method's check in the export wing)
and returns the plan `run` reads (`ctx.plan`: the checked source, the calibration files, the dtypes); `run` hands
the work to swiftbox/export/checkpoint.py around the method's writer, or to a whole-step writer (gguf) that measures
itself. Nothing is checked twice.
What each method is (capability, writer, calibration, layout, tolerances, loaders) is its record in
swiftbox/quant_methods.py; this module names no method. The map of swiftbox/export/ is that package's docstring.
"""
from __future__ import annotations

from typing import Optional

from swiftbox import quant_methods
from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.export.checks import ExportPlan
from swiftbox.steps import QuantizeStep


def check(cfg: QuantizeStep, platform: Platform, input: str) -> Optional[ExportPlan]:
    """Every refusal before anything is written: the device (exit 3 with the alternative), then the input by the
    method's own check (its record's `checker`: an adapter, an export already quantized, calibration data, the
    GGUF architecture and LoRA limits - exit 2/3). Returns what that check resolved; the runner adds the dtypes."""
    method = quant_methods.get(cfg.method)
    platform.require(method.feature)
    if not input:
        return None
    return quant_methods.resolve(method.checker)(cfg, input)


def dtype_plan(cfg: QuantizeStep, ctx: StepContext):
    """From the one policy: the export computes in its kernels' dtype (16-bit for GPTQ/AWQ/FP8) and the quality gate
    measures the unquantized source in that same dtype, so the gate sees the quantization, not a change of dtype."""
    from swiftbox.device import dtype_policy

    return dtype_policy.quantize(ctx.platform, cfg.dtype, sixteen_bit=quant_methods.get(cfg.method).sixteen_bit)


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    """The writer on the plan check made (`ctx.plan`): a whole-step writer (gguf) measures and gates itself, the
    others run inside export/checkpoint.py's measured flow."""
    from swiftbox.export import checkpoint

    method = quant_methods.get(cfg.method)
    if method.whole_step:
        return quant_methods.resolve(method.writer)(cfg, ctx)
    return checkpoint.run(cfg, ctx)


PIPELINE = declare("quantize", QuantizeStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)
