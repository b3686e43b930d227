"""The Python API: one function per pipeline, taking the same arguments as the recipe step.

    import swiftbox as sb
    sb.sft(model="toy", dataset="recipes/data/parity_sft.jsonl", lora={"rank": 8}, epochs=3)
    sb.run_recipe("recipes/quickstart.yaml", overrides=["sft.epochs=1"])

Each returns the step's summary entry: {"step", "output", "ok", "metrics"}.
`parity(a, b, probe=None)` compares two models' logits (see swiftbox.parity).
"""
from __future__ import annotations

from typing import Optional

from swiftbox.parity import parity
from swiftbox.runner import run_recipe, run_step
from swiftbox.steps import STEP_TYPES


def _make(kind: str):
    schema = STEP_TYPES[kind]

    def step(model: Optional[str] = None, *, device: Optional[str] = None, runs_root=None, **settings) -> dict:
        if model is not None:
            settings["model"] = model
        return run_step(kind, settings, runs_root=runs_root, device=device)

    fields = "\n".join(f"    {name}: {f.description or ''}" for name, f in schema.model_fields.items())
    step.__name__ = kind
    step.__qualname__ = kind
    step.__doc__ = f"Run the `{kind}` step (see docs/recipes.md). Settings:\n{fields}"
    return step


# one function per step kind, named like it (swiftbox.sft, swiftbox.eval, ...): a new schema in STEP_TYPES
# is a new API function without a change here
for _kind in STEP_TYPES:
    globals()[_kind] = _make(_kind)

__all__ = ["run_recipe", "parity", *STEP_TYPES]
