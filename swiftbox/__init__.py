"""swiftbox: download, fine-tune, align, merge, quantize and serve LLMs on Ascend NPU, CUDA GPU or CPU.

The public API lives in swiftbox.api and is loaded lazily so `import swiftbox` stays cheap.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pathlib import Path

_API = {"run_recipe", "download", "sft", "dpo", "merge", "quantize", "serve", "chat", "eval", "parity"}
_PIPELINES = Path(__file__).resolve().parent / "pipelines"


def _is_step_kind(name: str) -> bool:
    """A step kind added later has its module under pipelines/ (checked without importing anything)."""
    return name.isidentifier() and ((_PIPELINES / f"{name}.py").is_file() or (_PIPELINES / name).is_dir())


def __getattr__(name: str):
    if name == "parity":  # a callable module: sb.parity(a, b) and `import swiftbox.parity` agree
        import importlib

        return importlib.import_module("swiftbox.parity")
    if name in _API or (name != "base" and _is_step_kind(name)):
        from swiftbox import api

        return getattr(api, name)
    if name == "current_platform":
        from swiftbox.device import current_platform

        return current_platform
    raise AttributeError(f"module 'swiftbox' has no attribute {name!r}")


__all__ = sorted(_API | {"current_platform", "__version__"})
