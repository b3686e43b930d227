"""Model hubs: reference resolution (resolve), hub clients (clients), cached snapshots (snapshot).

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily, so importing one module here loads no other."""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.hub.resolve import resolve_model

_EXPORTS = {"resolve_model": "swiftbox.hub.resolve"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["resolve_model"]
