"""One module per step kind. Each module exposes:

    PRODUCES_MODEL: bool      # does its output become the next step's input model?
    def run(cfg, ctx) -> StepResult | dict   # cfg: the step's typed config, ctx: swiftbox.runner.StepContext

Modules import torch and friends inside `run`, never at import time, so `--help` stays fast.
"""
from __future__ import annotations

import importlib

from swiftbox.errors import NotBuilt

ISSUE_FOR = {
    "sft": "fine-tuning", "dpo": "fine-tuning", "eval": "fine-tuning", "merge": "export", "quantize": "export", "verify": "export",
    "serve": "serving", "chat": "serving", "download": "model download",
}


def load_pipeline(kind: str):
    name = f"swiftbox.pipelines.{kind}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
            raise NotBuilt(f"step '{kind}' is not implemented yet (the {ISSUE_FOR.get(kind, kind)} pipeline has "
                           f"not landed); no output was written") from None
        raise
    if not hasattr(module, "run"):
        raise NotBuilt(f"step '{kind}' is not implemented yet; no output was written")
    return module
