"""The pipeline contract: what a step gets (StepContext) and what it returns (StepResult)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from swiftbox.artifacts import read_manifest
from swiftbox.device import Platform


@dataclass
class StepResult:
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # merged into the manifest (e.g. artifact, base_model)


@dataclass
class StepContext:
    recipe: str
    kind: str
    index: int
    input: Optional[str]          # model reference or artifact dir the step starts from
    work_dir: Path                # write everything here; it becomes `output` when the step succeeds
    output: Path
    platform: Platform
    header_devices: Optional[Union[int, str]] = None

    @property
    def input_manifest(self) -> Optional[dict]:
        if self.input and Path(self.input).is_dir():
            return read_manifest(self.input)
        return None

    def lineage(self) -> list[dict]:
        """Manifests from the input back to the first artifact (nearest first)."""
        out, seen, ref = [], set(), self.input
        while ref and Path(ref).is_dir() and ref not in seen:
            seen.add(ref)
            manifest = read_manifest(ref)
            if manifest is None:
                break
            out.append(manifest)
            ref = manifest.get("input")
        return out

    def dtype(self, requested: Optional[str]) -> str:
        return self.platform.resolve_dtype(requested)
