"""Models: loading of models/tokenizers/adapter chains (loading, which reads the hub) and the adapter record
(adapter_file, the one reader of adapter_config.json).

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily: `modeling.adapter_file` sits in the base layer and must not pull the loaders in through this file."""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.compat import gptqmodel_env
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec, torch_dtype

# name -> the module that defines it (gptqmodel's environment, set before it is imported, lives in compat)
_EXPORTS = {"load_model": "swiftbox.modeling.loading", "load_tokenizer": "swiftbox.modeling.loading",
            "resolve_spec": "swiftbox.modeling.loading",
            "torch_dtype": "swiftbox.modeling.loading", "gptqmodel_env": "swiftbox.compat"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["gptqmodel_env", "load_model", "load_tokenizer", "resolve_spec", "torch_dtype"]
