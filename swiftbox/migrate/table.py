"""The record one row of a peer's mapping table is: a peer key (or flag), the swiftbox setting it becomes, the
peer's own default (applied when the peer's file omits the key: same meaning means the peer's default, not
swiftbox's), and how it is handled - mapped, ignored (it only tunes logging, speed or checkpoint housekeeping; the
run's header lists it) or refused (swiftbox cannot honour it; the line says what to use instead).

A table (llamafactory.py, axolotl.py, ms_swift.py) is a list of these; the engine (engine.py) reads a peer's
config through it, the exporter writes one back through it, and docs.py renders it into docs/migrating.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from swiftbox.errors import UserError

ABSENT = object()      # "no default": an omitted key sets nothing
MAP, IGNORE, REFUSE, READ = "map", "ignore", "refuse", "read"


class Refused(UserError):
    """A peer key or value swiftbox cannot honour: one line naming it and what to use instead (exit 2)."""


@dataclass(frozen=True)
class Key:
    """One row: `name` (the peer's key), `to` (swiftbox's setting: `model` is the recipe's model, any other path is
    a setting of the step, e.g. `lora.rank`; empty for keys the importer reads itself), `default` (the peer's, a
    value or a function of the whole peer config), `how` (map | ignore | refuse | read), `note` (why / what to use
    instead), `convert` (peer value -> swiftbox value, may raise Refused) and `inverse` (back, for export-config),
    `accept` (values of a refused key that mean swiftbox's own behaviour and are therefore fine), `kinds` (step kinds
    the key applies to; elsewhere it has no effect in the peer either and is listed as ignored), `aliases` (older
    names of the same key)."""

    name: str
    to: str = ""
    default: Any = ABSENT
    how: str = MAP
    note: str = ""
    convert: Optional[Callable[[Any], Any]] = None
    accept: tuple = (None,)
    kinds: tuple[str, ...] = ()
    aliases: tuple[str, ...] = field(default=())
    inverse: Optional[Callable[[Any], Any]] = None   # swiftbox value -> the peer's (export-config)

    def default_for(self, config: dict) -> Any:
        return self.default(config) if callable(self.default) else self.default

    def shown_default(self) -> str:
        if self.default is ABSENT:
            return "-"
        if callable(self.default):
            return (self.default.__doc__ or "depends").strip()
        return "null" if self.default is None else str(self.default).lower() if isinstance(self.default, bool) \
            else str(self.default)


def as_bool(value: Any) -> bool:
    """true/false as YAML, JSON or a command line writes them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"expected true or false, got {value!r}")


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return as_int(float(value)) if "." in value or "e" in value.lower() else int(value)
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number, got {value!r}") from None


def as_list(value: Any) -> list:
    """A list, or a comma-separated string (LLaMA-Factory writes `dataset: a,b`, `lora_target: q_proj,v_proj`)."""
    if isinstance(value, (list, tuple)):
        return [v.strip() if isinstance(v, str) else v for v in value]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    raise ValueError(f"expected a list or comma-separated names, got {value!r}")
