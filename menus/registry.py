"""The model choices the menu offers: `toy`, then the presets of swiftbox.catalog.presets (with their
memory estimates)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from swiftbox.catalog import Preset
from swiftbox.catalog import presets as registry

TOY = "toy"


@dataclass
class ModelOption:
    ref: str                          # what goes into the recipe's `model:`
    title: str                        # what the menu shows
    preset: Optional[Preset] = None


def preset_ref(preset: Preset) -> str:
    """What a recipe names the preset by: its alias when it has an offline source (the alias is what falls back
    to it without a hub), else its ModelScope id."""
    return preset.name if preset.wheel else preset.modelscope_id


def model_options() -> list[ModelOption]:
    """`toy` first, then the registry's presets (see preset_ref)."""
    out = [ModelOption(TOY, "toy  (built-in tiny model, offline)")]
    for p in registry.PRESETS:
        title = f"{p.name}  (offline: {p.wheel.requirement} from PyPI)" if p.wheel else f"{p.name}  ({p.modelscope_id})"
        out.append(ModelOption(preset_ref(p), title, p))
    return out


def memory_estimate(ref: str, method: str, dtype: str) -> Optional[float]:
    """GiB the registry expects `method` to need for `ref`, or None for a model it does not know."""
    preset = registry.find(ref)
    if preset is None:
        return None
    if method == "dora":
        method = "lora"  # DoRA trains the same adapter plus a magnitude vector: LoRA's footprint, near enough
    return registry.memory_gib(preset, method, dtype)
