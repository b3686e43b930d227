"""The quality report every export carries, and the gate that fails the step past its tolerances.

Figures: size on disk vs the source, perplexity on held-out rows before/after, logit cosine and argmax
agreement on the parity probe, task accuracy before/after (when an eval set is given), and a look at the
saved tensors themselves: every linear layer of the decoder must be stored in the method's quantized
layout, so a silently un-quantized export (ms-swift #9830) cannot pass. Comparisons are NaN-safe: a
figure passes only when `figure <= bound` (or `>=`) is true, so NaN fails.
"""
from __future__ import annotations

import math
from pathlib import Path

from swiftbox import quant_methods
from swiftbox.errors import SwiftboxError

WEIGHT_SUFFIXES = (".safetensors", ".bin")

# how each method's quantized layers look on disk (Layout: tensor, dtypes, companion) and its documented tolerances
# (docs/export.md) are its record's: swiftbox/quant_methods.py
DEFAULT_TOLERANCES = quant_methods.CHECKPOINT_TOLERANCES


class QualityGateFailed(SwiftboxError):
    """The export broke a documented tolerance (exit 1); nothing was written."""


def perplexity(model, rows: list[dict]) -> float:
    """exp(mean token negative log-likelihood) over `rows` (NaN when the model's logits are not finite)."""
    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row["input_ids"]], device=device)
            if ids.shape[1] < 2:
                continue
            logits = model(input_ids=ids).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            total, count = total + float(loss), count + ids.shape[1] - 1
    mean = total / max(count, 1)
    return math.exp(mean) if math.isfinite(mean) and mean < 700 else float("nan")


def weight_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def tensor_dtypes(folder: Path) -> dict[str, str]:
    """name -> safetensors dtype ("F32", "I32", "U8", "F8_E4M3", ...) of every tensor in `folder`, headers only.
    Raises ValueError naming the file when a shard cannot be read (truncated, corrupted, not safetensors)."""
    from safetensors import safe_open

    out: dict[str, str] = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                    out[name] = str(handle.get_slice(name).get_dtype())
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for every kind of damage
            raise ValueError(f"{file.name} cannot be read ({' '.join(str(exc).split())[:160]})") from None
    return out


def linear_modules(source: dict[str, str], shapes_2d: set[str]) -> list[str]:
    """Decoder linear layers of the source: 2-D `.weight` tensors inside `layers.N.` (not norms, not embeddings)."""
    mods = []
    for name in source:
        if name.endswith(".weight") and ".layers." in name and name in shapes_2d and "norm" not in name:
            mods.append(name[: -len(".weight")])
    return sorted(mods)


def two_dim_tensors(folder: Path) -> set[str]:
    from safetensors import safe_open

    names = set()
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            keys = list(handle.keys())
            names |= {n for n in keys if len(handle.get_slice(n).get_shape()) == 2}
    return names


def inspect_export(source_dir: Path, export_dir: Path, layout: quant_methods.Layout) -> dict:
    """How many of the source's decoder linear layers the export stores in `layout`'s quantized form.

    Returns {"quantized_modules", "linear_modules", "unquantized": [first few names], "error": str|None}."""
    try:
        exported = tensor_dtypes(export_dir)
    except ValueError as exc:
        return {"quantized_modules": 0, "linear_modules": 0, "unquantized": [], "error": str(exc)}
    modules = linear_modules(tensor_dtypes(source_dir), two_dim_tensors(source_dir))
    main, dtypes, companion = layout.tensor, layout.dtypes, layout.companion
    bad = []
    for m in modules:
        name = main.format(m=m)
        has_companion = any(k.startswith(companion.format(m=m)) for k in exported)
        if exported.get(name) not in dtypes or not has_companion:
            bad.append(m)
    return {"quantized_modules": len(modules) - len(bad), "linear_modules": len(modules), "unquantized": bad[:3],
            "error": None if modules else f"no decoder linear layers found in {source_dir}"}


def tolerances(bits: int, overrides: dict | None, method: str = quant_methods.DEFAULT) -> dict[str, float]:
    """`method`'s documented bounds for `bits`, with the step's `tolerance:` overrides on top."""
    out = quant_methods.get(method).tolerance(bits)
    out.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return out


def gate(metrics: dict, inspection: dict, tol: dict[str, float]) -> list[str]:
    """The tolerances the export breaks, one phrase each (empty = it passes). NaN never passes."""
    broken = []
    if inspection.get("error"):
        broken.append(inspection["error"])
    elif inspection["quantized_modules"] != inspection["linear_modules"]:
        broken.append(f"{inspection['linear_modules'] - inspection['quantized_modules']} of "
                      f"{inspection['linear_modules']} linear layers are not stored quantized "
                      f"(e.g. {', '.join(inspection['unquantized'])})")
    checks = [("size_ratio", "<=", "max_size_ratio"), ("perplexity_ratio", "<=", "max_perplexity_ratio"),
              ("cosine_mean", ">=", "min_cosine"), ("argmax_agreement", ">=", "min_argmax_agreement"),
              ("accuracy_drop", "<=", "max_accuracy_drop")]
    for figure, op, bound in checks:
        if figure not in metrics or metrics[figure] is None:
            continue
        value, limit = metrics[figure], tol[bound]
        ok = value <= limit if op == "<=" else value >= limit
        if not ok:  # also true for NaN
            broken.append(f"{figure} {value:.4g} (needs {op} {limit:g})")
    return broken

