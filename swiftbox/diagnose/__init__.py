"""Seeing inside a run: the profiler trace's summary (trace_summary; the window itself is a training callback,
swiftbox/training/profile_window.py), the config
check between two artifacts (fingerprint, compare) and the layer-by-layer precision compare (precision)..

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily, so importing one module here loads no other."""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.diagnose.compare import compare_cli
    from swiftbox.diagnose.precision import precision_cli

_EXPORTS = {"compare_cli": "swiftbox.diagnose.compare", "precision_cli": "swiftbox.diagnose.precision"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["compare_cli", "precision_cli"]
