"""One module per step kind, found by name: the step kinds are the schemas in `swiftbox.steps.STEP_TYPES`,
and `swiftbox/pipelines/<kind>.py` declares `PIPELINE` (see swiftbox.contract for the contract).

Modules import torch and friends inside their functions, never at import time, so `--help` stays fast.
"""
from __future__ import annotations

import importlib
from typing import Any

from swiftbox.contract import Declared, Pipeline
from swiftbox.steps import STEP_TYPES


def load_pipeline(kind: str) -> Pipeline[Any]:
    """The Pipeline for a step kind (a key of STEP_TYPES)."""
    if kind not in STEP_TYPES:
        raise KeyError(f"unknown step kind {kind!r}; expected one of {', '.join(STEP_TYPES)}")
    module = importlib.import_module(f"swiftbox.pipelines.{kind}")
    pipeline = getattr(module, "PIPELINE", None)
    if not isinstance(pipeline, Declared) or pipeline.kind != kind or pipeline.schema is not STEP_TYPES[kind]:
        raise TypeError(f"swiftbox/pipelines/{kind}.py must end with PIPELINE = declare({kind!r}, "
                        f"{STEP_TYPES[kind].__name__}, ...)")
    return pipeline
