"""Recent outputs under runs/ (read from their swiftbox.json), offered as inputs to later steps."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from swiftbox.artifacts import MANIFEST, read_manifest
from swiftbox.errors import UserError

RUNS = Path("runs")
MAX_DEPTH = 3


@dataclass
class Artifact:
    path: str
    kind: str              # the step that made it (sft, merge, ...)
    artifact: str          # model | adapter | report
    base_model: Optional[str]
    mtime: float
    metrics: dict

    @property
    def title(self) -> str:
        base = f" on {self.base_model}" if self.base_model and self.artifact == "adapter" else ""
        return f"{self.path}  ({self.kind} {self.artifact}{base})"


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
                                  metrics=manifest.get("metrics") or {}))
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
                    metrics=manifest.get("metrics") or {})
