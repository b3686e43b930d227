"""The one dtype policy: which dtype each step computes in, saves in, and checks "is this the same model?" in.

Every pipeline asks here instead of deciding for itself; docs/devices.md has the table. The rules:

- **compute** (training, eval, serve, chat): the platform's default (`platform.resolve_dtype("auto")`: CPU bf16 only
  where bf16 is native - AMX / AVX512_BF16 / Arm BF16, or SWIFTBOX_CPU_BF16=on - else fp32; CUDA/NPU bf16, else
  fp16), or what the step asks for.
- **merge** computes and checks in float32 (folding B@A into W and checking it are exact only there) and saves in the
  source model's own dtype (a bf16 release stays bf16, a float32 one float32) or the step's `dtype:`; the saved file is
  checked against the merged weights rounded to that dtype, so the rounding is reported, never mistaken for a fault.
- **full fine-tuning** keeps float32 master weights under 16-bit autocast and saves them in the compute dtype;
  adapters are saved in float32 (PEFT keeps them so).
- **quantize**: the export computes in its kernels' dtype (GPTQ/AWQ/FP8: 16-bit), and its quality gate measures the
  unquantized source in that same dtype, so the gate sees the quantization, not a dtype change.
- **every "same model?" check** (merge, `parity`, verify's links, quantize's parity figures, serve's logprobs) runs
  both sides in ONE dtype - float32 for links that should be exact (merge), the quantized side's compute dtype for
  quantized links - and allows |Δlogit| <= relative_tolerance(dtype) x max(1, max |logit|): float32 1e-4, 16-bit
  5e-2. A correct chain passes in float32 and bf16 alike; one perturbed layer fails either way
  (tests/flows/test_dtype_policy.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from swiftbox import quant_methods

if TYPE_CHECKING:
    from swiftbox.device.base import Platform

# relative tolerance of a "same model?" check: max |Δlogit| / max(1, max |logit|), by the dtype the check runs in
RELATIVE_TOLERANCE: dict[str, float] = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 5e-2}
# unit roundoff (half an ulp at 1.0) per dtype: what rounding one value costs, for tolerances built from it
UNIT_ROUNDOFF: dict[str, float] = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -9, "float16": 2.0 ** -11}
PRECISION_ORDER = ("float32", "float16", "bfloat16")   # most precise first
MERGE_COMPUTE = "float32"
# quantized exports whose kernels compute in 16-bit: the records' `sixteen_bit` (swiftbox/quant_methods.py)


@dataclass(frozen=True)
class DtypePlan:
    """What one step computes in, saves its weights in and runs its same-model check in."""

    compute: str
    save: Optional[str] = None        # None: the step writes no weights (adapters: float32, see `describe`)
    check: Optional[str] = None       # None: the step checks no model against another
    note: str = ""

    @property
    def tolerance(self) -> Optional[float]:
        return None if self.check is None else relative_tolerance(self.check)

    def describe(self) -> str:
        parts = [f"compute {self.compute}"]
        if self.save:
            parts.append(f"save {self.save}")
        if self.check:
            parts.append(f"check {self.check} (|Δlogit| <= {self.tolerance:g} x max(1, |logit|))")
        return ", ".join(parts) + (f"; {self.note}" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {"compute": self.compute, "save": self.save, "check": self.check, "tolerance": self.tolerance}


def relative_tolerance(dtype: str) -> float:
    """The relative |Δlogit| a same-model check in `dtype` allows (x max(1, max |logit|))."""
    return RELATIVE_TOLERANCE.get(dtype, RELATIVE_TOLERANCE["bfloat16"])


def logit_tolerance(dtype: str, magnitude: float) -> float:
    """The absolute |Δlogit| a same-model check in `dtype` allows where the logits reach `magnitude`."""
    return relative_tolerance(dtype) * max(1.0, float(magnitude))


def least_precise(*dtypes: Optional[str]) -> str:
    """The least precise of `dtypes` (float32 when none is given): what a comparison across them can hold to."""
    known = [d for d in dtypes if d in PRECISION_ORDER]
    return max(known, key=PRECISION_ORDER.index) if known else "float32"


def source_dtype(model_dir: Any) -> str:
    """The dtype a saved model's weights are stored in (config.json `dtype` / `torch_dtype`); float32 if unsaid."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return "float32"
    value = config.get("dtype") or config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
    return value if value in PRECISION_ORDER else "float32"


def kernel_dtype(platform: Platform, requested: str) -> str:
    """The dtype 16-bit quantized kernels (GPTQ/AWQ/FP8) compute in: `requested` when it is 16-bit, else bf16 where
    the platform has it, else fp16 (gptqmodel's CPU kernels refuse float32)."""
    if requested in ("bfloat16", "float16"):
        return requested
    return "bfloat16" if platform.bf16_supported() else "float16"


def compute(platform: Platform, requested: Optional[str] = None) -> str:
    """Training / eval / serve / chat: the platform's default, or what the step asks for."""
    return platform.resolve_dtype(requested)


def training(platform: Platform, requested: Optional[str], *, full: bool) -> DtypePlan:
    dt = compute(platform, requested)
    if full:
        return DtypePlan(dt, save=dt, note="float32 master weights" if dt != "float32" else "")
    return DtypePlan(dt, save="float32", note="adapter weights")


def merge(platform: Platform, requested: Optional[str], source: str) -> DtypePlan:
    """Merged and checked in float32, saved in the source model's dtype - or in `requested` (the step's `dtype:`)."""
    save = platform.resolve_dtype(requested) if requested not in (None, "", "auto") else source
    return DtypePlan(MERGE_COMPUTE, save=save, check=MERGE_COMPUTE)


def quantize(platform: Platform, requested: Optional[str], *, sixteen_bit: bool) -> DtypePlan:
    """The export computes in its kernels' dtype; the gate measures the source in the same one."""
    dt = compute(platform, requested)
    if sixteen_bit:
        dt = kernel_dtype(platform, dt)
    return DtypePlan(dt, save=dt, check=dt, note="the unquantized source is measured in the same dtype")


def model_compute(platform: Platform, requested: Optional[str], quantized: Optional[str]) -> str:
    """What a model loads and computes in: `requested` (or the platform's), made 16-bit for 16-bit kernels."""
    dt = compute(platform, requested)
    return kernel_dtype(platform, dt) if quant_methods.computes_in_16_bit(quantized) else dt


def same_model_check(platform: Platform, requested: Optional[str], quantized: tuple[Optional[str], ...] = ()) -> str:
    """The ONE dtype both sides of a same-model check run in: `requested` if given; else float32 when no side is a
    16-bit-kernel export (the check then sees the models, not rounding), else that kernel's dtype for both."""
    if requested not in (None, "", "auto"):
        dt = platform.resolve_dtype(requested)
    else:
        dt = "float32"
    if any(quant_methods.computes_in_16_bit(q) for q in quantized):
        dt = kernel_dtype(platform, dt)
    return dt


def policy_rows(platform: Platform) -> list[dict[str, Any]]:
    """The policy on `platform` as rows (doctor prints them; docs/devices.md has the table for every device)."""
    default = compute(platform)
    kernel = kernel_dtype(platform, default)
    methods = quant_methods.METHODS.values()
    sixteen = " / ".join(m.name for m in methods if m.sixteen_bit)          # gptq / awq / fp8
    other = " / ".join(m.name for m in methods if not m.sixteen_bit and not m.whole_step)   # bnb
    rows = [
        ("sft / dpo / kto / orpo / simpo / grpo / rm (LoRA, DoRA)", training(platform, None, full=False)),
        ("the same, method: full", training(platform, None, full=True)),
        ("qlora", DtypePlan(default, save="float32", note="4-bit NF4 base, adapter weights")),
        ("eval / serve / chat", DtypePlan(default)),
        ("merge", merge(platform, None, "the source model's dtype")),
        (f"quantize {sixteen}", quantize(platform, None, sixteen_bit=True)),
        (f"quantize {other}", quantize(platform, None, sixteen_bit=False)),
        ("parity, verify links (unquantized sides)", DtypePlan(same_model_check(platform, None),
                                                               check=same_model_check(platform, None))),
        (f"parity, verify links to a {sixteen} export", DtypePlan(kernel, check=kernel)),
    ]
    return [{"step": step, **plan.as_dict()} for step, plan in rows]


__all__ = [
    "DtypePlan", "RELATIVE_TOLERANCE", "UNIT_ROUNDOFF", "compute", "kernel_dtype", "least_precise", "logit_tolerance",
    "merge", "model_compute", "policy_rows", "quantize", "relative_tolerance", "same_model_check", "source_dtype",
    "training",
]
