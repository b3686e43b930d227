"""Which pipelines are in this checkout, found without importing them (no torch at menu time)."""
from __future__ import annotations

import importlib.util
from typing import Optional

from swiftbox.pipelines import ISSUE_FOR


def is_built(kind: str) -> bool:
    try:
        return importlib.util.find_spec(f"swiftbox.pipelines.{kind}") is not None
    except (ImportError, ValueError):
        return False


def not_built_reason(kind: str) -> Optional[str]:
    """None when the `kind` pipeline is here, else the plain sentence the menu shows."""
    if is_built(kind):
        return None
    return f"the {kind} pipeline is not built yet (it lands with the {ISSUE_FOR.get(kind, kind)} issue)"
