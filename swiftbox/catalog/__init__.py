"""What models exist, below the hub that fetches them: the presets (`presets`), the committed toy model with what
builds and measures it (`toy`, `toy_corpus`, `toy_pretrain`, `scoring` — greedy answers, choices and perplexity of a
loaded model, used by the toy's own check and by eval, quantize's quality gate and verify).

The public surface (`__all__`: the presets module and the toy's files, what bench/ and menus/ may import;
tests/unit/test_layers.py holds them to it) is loaded lazily, so importing one module here loads no other."""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.catalog import presets
    from swiftbox.catalog.presets import Preset
    from swiftbox.catalog.toy import COMMITTED, build_tokenizer, cache_root, toy_path

_EXPORTS = {"Preset": "swiftbox.catalog.presets", "COMMITTED": "swiftbox.catalog.toy",
            "build_tokenizer": "swiftbox.catalog.toy", "cache_root": "swiftbox.catalog.toy",
            "toy_path": "swiftbox.catalog.toy"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["COMMITTED", "Preset", "build_tokenizer", "cache_root", "presets", "toy_path"]
