"""Recent outputs under runs/ (read from their swiftbox.json), offered as inputs to later steps.

`refusal(artifact, task)` says why an artifact cannot be the input of a task (a quantized export
cannot be fine-tuned, merged or quantized again; only an adapter can be merged), so the menu greys it
out with that reason on the first screen instead of refusing after the questions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from swiftbox import quant_methods
from swiftbox.artifacts import MANIFEST, read_manifest
from swiftbox.errors import UserError

RUNS = Path("runs")
MAX_DEPTH = 3


@dataclass
class Artifact:
    path: str
    kind: str              # the step that made it (sft, merge, ...)
    artifact: str          # model | adapter | reward-model | report
    base_model: Optional[str]
    mtime: float
    metrics: dict
    quantized: Optional[str] = None  # "gptq" for a quantized export

    @property
    def title(self) -> str:
        base = f" on {self.base_model}" if self.base_model and self.artifact == "adapter" else ""
        quant = f", {self.quantized}-quantized" if self.quantized else ""
        return f"{self.path}  ({self.kind} {self.artifact}{base}{quant})"


TRAINING = ("sft", "pt", "dpo", "kto", "orpo", "simpo", "rm", "grpo", "gkd")


def refusal(artifact: Artifact, task: Optional[str]) -> Optional[str]:
    """Why `artifact` cannot be the input of `task` (None: it can). Mirrors the pipelines' own refusals."""
    if task is None:
        return None
    if artifact.artifact == "reward-model":
        return "a reward model scores replies; it is not a model to train, chat with or export"
    if artifact.artifact in ("gguf", "gguf-lora"):
        return "a GGUF export runs in llama.cpp / Ollama (ollama create NAME -f Modelfile), not in swiftbox's engines"
    if artifact.quantized:
        if task in TRAINING:
            return f"a {artifact.quantized}-quantized export cannot be fine-tuned; pick its base model"
        if task == "quantize":
            return "already quantized"
        if task == "merge":
            return "a quantized export is not an adapter"
    if task == "merge" and artifact.artifact != "adapter":
        return f"a {artifact.kind} {artifact.artifact} is not an adapter; merge takes the output of sft/dpo"
    if task == "quantize" and artifact.artifact == "adapter":
        return "an adapter: merge it first, then quantize the merged model"
    return None


def _quantized(folder: Path, manifest: dict) -> Optional[str]:
    try:
        config = json.loads((folder / "config.json").read_text())
        method = (config.get("quantization_config") or {}).get("quant_method")
        if method:
            return str(method)
    except (OSError, ValueError):
        pass
    if manifest.get("kind") == "quantize":
        return str((manifest.get("config") or {}).get("method") or quant_methods.DEFAULT)   # the step's default
    return None


def _artifact_type(manifest: dict) -> str:
    if manifest.get("artifact"):
        return str(manifest["artifact"])
    return "model" if manifest.get("kind") in ("download", "merge", "quantize") else "report"


def recent(root: Path = RUNS, types: Iterable[str] = ("model", "adapter"), limit: int = 8) -> list[Artifact]:
    """Newest first: finished artifact dirs under `root` whose type is in `types`."""
    root = Path(root)
    if not root.is_dir():
        return []
    found: list[Artifact] = []
    for depth in range(1, MAX_DEPTH + 1):
        for file in root.glob("/".join(["*"] * depth) + "/" + MANIFEST):
            folder = file.parent
            if folder.name.endswith(".partial") or folder.name.startswith("."):
                continue
            try:
                manifest = read_manifest(folder) or {}
            except UserError:
                continue
            kind = _artifact_type(manifest)
            if kind not in types:
                continue
            found.append(Artifact(path=folder.as_posix(), kind=str(manifest.get("kind", "?")), artifact=kind,
                                  base_model=manifest.get("base_model"), mtime=file.stat().st_mtime,
                                  metrics=manifest.get("metrics") or {}, quantized=_quantized(folder, manifest)))
    found.sort(key=lambda a: a.mtime, reverse=True)
    return found[:limit]


def describe(path: str) -> Optional[Artifact]:
    """The Artifact for one directory (used when a finished step is carried forward)."""
    folder = Path(path)
    try:
        manifest = read_manifest(folder)
    except UserError:
        return None
    if manifest is None:
        return None
    return Artifact(path=folder.as_posix(), kind=str(manifest.get("kind", "?")), artifact=_artifact_type(manifest),
                    base_model=manifest.get("base_model"), mtime=(folder / MANIFEST).stat().st_mtime,
                    metrics=manifest.get("metrics") or {}, quantized=_quantized(folder, manifest))
