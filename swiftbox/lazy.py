"""The packages' lazy public surfaces: one `__getattr__` maker for every `__init__` that exports names from its
modules without importing them (importing `swiftbox.x` must not pull torch in; tests/unit/test_layers.py holds
bench/ and menus/ to these surfaces)."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Union

Target = Union[str, "tuple[str, str]"]      # the defining module, or (module, attribute) when the name differs


def lazy_exports(package: str, exports: Mapping[str, Target]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: a name in `exports` is imported from its module when first asked for."""

    def __getattr__(name: str) -> Any:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = (target, name) if isinstance(target, str) else target
        return getattr(importlib.import_module(module), attr)

    return __getattr__


__all__ = ["lazy_exports"]
