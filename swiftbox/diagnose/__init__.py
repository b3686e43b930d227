"""Seeing inside a run: the profiler trace's summary (trace_summary; the window itself is a training callback,
swiftbox/training/profile_window.py), the config
check between two artifacts (fingerprint, compare) and the layer-by-layer precision compare (precision)..

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily, so importing one module here loads no other."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftbox.diagnose.compare import compare_cli
    from swiftbox.diagnose.precision import precision_cli

_EXPORTS = {"compare_cli": "swiftbox.diagnose.compare", "precision_cli": "swiftbox.diagnose.precision"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["compare_cli", "precision_cli"]
