"""The model choices the menu offers: `toy`, then the presets of swiftbox.modeling.registry (with their
memory estimates)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from swiftbox.modeling import registry
from swiftbox.modeling.registry import Preset

TOY = "toy"


@dataclass
class ModelOption:
    ref: str                          # what goes into the recipe's `model:`
    title: str                        # what the menu shows
    preset: Optional[Preset] = None


def model_options() -> list[ModelOption]:
    """`toy` first, then the registry's presets by ModelScope id."""
    out = [ModelOption(TOY, "toy  (built-in tiny model, offline)")]
    out += [ModelOption(p.modelscope_id, f"{p.name}  ({p.modelscope_id})", p) for p in registry.PRESETS]
    return out


def memory_estimate(ref: str, method: str, dtype: str) -> Optional[float]:
    """GiB the registry expects `method` to need for `ref`, or None for a model it does not know."""
    preset = registry.find(ref)
    if preset is None:
        return None
    if method == "dora":
        method = "lora"  # DoRA trains the same adapter plus a magnitude vector: LoRA's footprint, near enough
    return registry.memory_gib(preset, method, dtype)
