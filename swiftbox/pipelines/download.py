"""download step: make a model available locally and record where it came from.

`toy` is built offline; a local directory is checked and copied. Hub sources (ModelScope, Hugging
Face) land with the model-download issue.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from swiftbox.errors import NotBuilt

PRODUCES_MODEL = True


def fetch(ref: str, revision: str | None = None) -> Path:
    raise NotBuilt(f"model {ref!r}: hub downloads (ModelScope / Hugging Face) are not implemented yet; "
                   "use toy or a local directory")


def run(cfg, ctx):
    from swiftbox.hub import resolve_model
    from swiftbox.runner import StepResult

    src = resolve_model(ctx.input, revision=cfg.revision)
    shutil.copytree(src, ctx.work_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("swiftbox.json"))
    files = sorted(p.name for p in Path(ctx.work_dir).iterdir() if p.is_file())
    size = sum((Path(ctx.work_dir) / f).stat().st_size for f in files)
    source = "toy" if ctx.input.startswith("toy") else "local"
    return StepResult(metrics={"size_bytes": size, "files": len(files)},
                      info={"artifact": "model", "source": source, "model_id": ctx.input, "files": files})
