"""quantize step: GPTQ / AWQ (gptqmodel), bitsandbytes NF4 / int8 and FP8 (transformers) exports, and GGUF
(llama.cpp / Ollama, with the `gguf` extra), each proven with numbers and gated (past a tolerance the step fails,
exit 1, and nothing is written).

This module only orders the step: `check` refuses (device, input), `run` hands the work to the export wing -
swiftbox/export/checkpoint.py around the method's writer, or a whole-step writer (gguf) that measures itself.
What each method is (capability, writer, calibration, layout, tolerances, loaders) is its record in
swiftbox/quant_methods.py; this module names no method. The map of swiftbox/export/ is that package's docstring.
"""
from __future__ import annotations

from swiftbox import quant_methods
from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.export.checks import check_input
from swiftbox.steps import QuantizeStep


def check(cfg: QuantizeStep, platform: Platform, input: str) -> None:
    """Refusals that need only the device (exit 3 with the alternative), and an input these writers cannot take (an
    adapter, an export already quantized: exit 2; a whole-step writer such as gguf checks its input itself)."""
    method = quant_methods.get(cfg.method)
    platform.require(method.feature)
    if input and not method.whole_step:
        check_input(input)


def dtype_plan(cfg: QuantizeStep, ctx: StepContext):
    """From the one policy: the export computes in its kernels' dtype (16-bit for GPTQ/AWQ/FP8) and the quality gate
    measures the unquantized source in that same dtype, so the gate sees the quantization, not a change of dtype."""
    from swiftbox.device import dtype_policy

    return dtype_policy.quantize(ctx.platform, cfg.dtype, sixteen_bit=quant_methods.get(cfg.method).sixteen_bit)


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    from swiftbox.export import checkpoint

    check(cfg, ctx.platform, ctx.input)
    method = quant_methods.get(cfg.method)
    if method.whole_step:   # its writer measures and gates itself (gguf: in llama.cpp)
        return quant_methods.resolve(method.writer)(cfg, ctx)
    return checkpoint.run(cfg, ctx, dtype_plan(cfg, ctx).compute)


PIPELINE = declare("quantize", QuantizeStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)
