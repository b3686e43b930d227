"""Standard benchmarks (MMLU, GSM8K, ARC, HellaSwag, IFEval) run through lm-evaluation-harness on local files.

`catalog` names what swiftbox offers and where each benchmark's data comes from; `data` finds those files
offline (a --data-dir, a path per benchmark, or the small slices shipped in `slices/`); `harness` hands the
harness a model swiftbox loaded (or a running server) and the tasks re-pointed at the local files, and keeps
its metrics as it reports them; `table` prints one comparison table for several models. Nothing here imports
lm-eval until a run starts: it is the `[eval]` extra (docs/evaluation.md says why lm-eval, not EvalScope).

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily, so importing one module here loads no other.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.benchmarks.catalog import resolve
    from swiftbox.benchmarks.harness import missing_extra

_EXPORTS = {"missing_extra": "swiftbox.benchmarks.harness", "resolve": "swiftbox.benchmarks.catalog"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["missing_extra", "resolve"]
