"""Local model references: is a reference a path, and does the directory hold a model or an adapter. Shared by
resolve.py (which reference goes where) and snapshot.py (a local directory's files), below both.
"""
from __future__ import annotations

from pathlib import Path

from swiftbox.errors import UserError
from swiftbox.modeling.adapter_file import is_adapter_dir


def is_local_ref(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or Path(ref).expanduser().exists()


def check_local_model(path: Path) -> Path:
    if not path.is_dir():
        raise UserError(f"{path}: not a directory; expected a model directory (config.json + *.safetensors)")
    if (path / "config.json").is_file() or is_adapter_dir(path):
        return path
    raise UserError(f"{path}: holds no model (no config.json or adapter_config.json)")
