"""The menu's only coupling to the model registry (swiftbox.modeling.registry), kept small on purpose.

When the registry is missing (or its shape differs) the menu offers `toy` plus free text and shows no
memory estimates. Shape used: `PRESETS` (presets with `.name`/`.modelscope_id`, or a dict name ->
preset), `find(ref)`, `METHODS` and `memory_gib(preset, method, dtype)`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Optional

TOY = "toy"


@dataclass
class ModelOption:
    ref: str           # what goes into the recipe's `model:`
    title: str         # what the menu shows
    preset: object = None


def _registry():
    try:
        return importlib.import_module("swiftbox.modeling.registry")
    except ImportError:
        return None


def _field(preset, *names):
    for name in names:
        value = preset.get(name) if isinstance(preset, dict) else getattr(preset, name, None)
        if value:
            return value
    return None


def model_options() -> list[ModelOption]:
    """`toy` first, then the registry's presets (if the registry is there)."""
    out = [ModelOption(TOY, "toy  (built-in tiny model, offline)")]
    reg = _registry()
    presets = getattr(reg, "PRESETS", None) if reg else None
    if isinstance(presets, dict):
        items = list(presets.items())
    elif isinstance(presets, (list, tuple)):
        items = [(_field(p, "name", "key"), p) for p in presets]
    else:
        items = []
    for name, preset in items:
        ref = _field(preset, "modelscope_id", "modelscope", "ms_id", "id") or name
        if not ref or ref == TOY:
            continue
        label = f"{name}  ({ref})" if name and name != ref else ref
        out.append(ModelOption(str(ref), label, preset))
    return out


def find_preset(ref: str):
    reg = _registry()
    if reg is None:
        return None
    find = getattr(reg, "find", None)
    if callable(find):
        try:
            return find(ref)
        except Exception:
            return None
    return next((o.preset for o in model_options() if o.ref == ref), None)


def memory_estimate(ref: str, method: str, dtype: str) -> Optional[float]:
    """GiB the registry expects `method` to need for `ref`, or None when it cannot say."""
    reg = _registry()
    fn = getattr(reg, "memory_gib", None) if reg else None
    preset = find_preset(ref)
    if not callable(fn) or preset is None:
        return None
    known = getattr(reg, "METHODS", ())
    if method == "dora" and "dora" not in known:
        method = "lora"  # DoRA trains the same adapter plus a magnitude vector: LoRA's footprint, near enough
    try:
        value = fn(preset, method, dtype)
    except Exception:
        return None
    return float(value) if isinstance(value, (int, float)) else None
