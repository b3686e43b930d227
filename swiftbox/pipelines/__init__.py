"""One module per step kind, found by name: the step kinds are the schemas in `swiftbox.steps.STEP_TYPES`,
and `swiftbox/pipelines/<kind>.py` declares `PIPELINE` (see swiftbox.contract for the contract).

Modules import torch and friends inside their functions, never at import time, so `--help` stays fast.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from swiftbox.contract import DeclaredPipeline, Pipeline
from swiftbox.lazy import lazy_exports
from swiftbox.steps import STEP_TYPES

if TYPE_CHECKING:
    from swiftbox.pipelines.sft import make_trainer


def load_pipeline(kind: str) -> Pipeline[Any]:
    """The Pipeline for a step kind (a key of STEP_TYPES)."""
    if kind not in STEP_TYPES:
        raise KeyError(f"unknown step kind {kind!r}; expected one of {', '.join(STEP_TYPES)}")
    module = importlib.import_module(f"swiftbox.pipelines.{kind}")
    pipeline = getattr(module, "PIPELINE", None)
    if not isinstance(pipeline, DeclaredPipeline) or pipeline.kind != kind or pipeline.schema is not STEP_TYPES[kind]:
        raise TypeError(f"swiftbox/pipelines/{kind}.py must end with PIPELINE = declare({kind!r}, "
                        f"{STEP_TYPES[kind].__name__}, ...)")
    return pipeline


_EXPORTS = {"make_trainer": "swiftbox.pipelines.sft"}   # sft's trainer as the step builds it (bench/ measures it)


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["load_pipeline", "make_trainer"]   # the public surface (tests/unit/test_layers.py holds bench/ to it)
