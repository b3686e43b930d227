"""Model hubs: reference resolution (resolve), hub clients (clients), cached snapshots (snapshot).

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily, so importing one module here loads no other."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftbox.hub.resolve import resolve_model

_EXPORTS = {"resolve_model": "swiftbox.hub.resolve"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["resolve_model"]
