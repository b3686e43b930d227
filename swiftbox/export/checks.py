"""The refusals an export's input can earn, all raised by the quantize step's `check` while nothing is on disk
(no `<out>`, no `<out>.partial`), and what they resolve, handed to `run` as the step's plan (`ExportPlan`).

Each method's record names its check (`QuantMethod.checker`, swiftbox/quant_methods.py): `check_checkpoint` here for
the transformers-checkpoint writers (an adapter: merge first; a model already quantized: exit 2; calibration data
missing, not JSON or without a usable row: exit 2); gguf's is writers/gguf_adapter.py `check` (adds the architecture
llama.cpp's converter must know, exit 3, and the GGUF LoRA limits). `run` re-checks and re-resolves none of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swiftbox.artifacts import is_adapter_dir, lineage
from swiftbox.contract import Plan
from swiftbox.errors import UserError
from swiftbox.export.calibration import calibration_files, read_texts

if TYPE_CHECKING:
    from swiftbox.modeling.loading import ModelSpec
    from swiftbox.steps import QuantizeStep


@dataclass(frozen=True, kw_only=True)
class ExportPlan(Plan):
    """What quantize's check resolved from the input: the source model (checked) and the calibration / held-out
    files with where they came from ("dataset", "lineage", "bundled")."""

    source: ModelSpec
    calibration: tuple[Path, ...]
    calibration_source: str


def check_input(ref: str) -> ModelSpec:
    """The ModelSpec of `ref`, refusing adapters (merge first) and models that are already quantized."""
    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import resolve_spec

    path = resolve_model(ref)
    if is_adapter_dir(path):
        raise UserError(f"quantize: {ref} is an adapter, not a full model; merge first: ./launch.sh merge {ref} "
                        f"--output {Path(str(ref)).name}-merged, then ./launch.sh quantize "
                        f"{Path(str(ref)).name}-merged "
                        "(in a recipe: put a merge: {} step before quantize)")
    spec = resolve_spec(str(path))
    if spec.quantized:
        raise UserError(f"quantize: {ref} is already {spec.quantized}-quantized; quantize its un-quantized source "
                        "instead")
    return spec


def calibration(cfg: QuantizeStep, ref: str) -> tuple[list[Path], str]:
    """The calibration / held-out files and their origin, refused now when missing, not JSON or without a usable
    row (read without a tokenizer: the rows a template would render are the rows counted)."""
    files, origin = calibration_files(cfg, lineage(ref))
    read_texts(files, None)
    return files, origin


def plan(cfg: QuantizeStep, spec: ModelSpec, ref: str) -> ExportPlan:
    files, origin = calibration(cfg, ref)
    return ExportPlan(source=spec, calibration=tuple(files), calibration_source=origin)


def check_checkpoint(cfg: QuantizeStep, ref: str) -> ExportPlan:
    """The check of the transformers-checkpoint writers (gptq, awq, bnb, fp8): a full, unquantized model, and
    calibration data."""
    return plan(cfg, check_input(ref), ref)
