"""One importer for every peer: a peer's config (a dict of its own keys) -> a swiftbox recipe dict, through the
peer's table (table.Key rows). The recipe then validates through swiftbox's own schema like any other.

A key not in the table is refused by name (never dropped); a refused key is one line naming it and what to use
instead; ignored keys come back in `Imported.ignored` for the run's header.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from swiftbox.migrate.table import ABSENT, IGNORE, MAP, READ, REFUSE, Key, Refused


@dataclass
class Context:
    """What a peer's own readers (datasets, template, stage) need besides the config."""

    peer: str
    source: str
    kind: str
    base: Path = field(default_factory=Path.cwd)   # where the peer resolves relative paths (its working directory)
    fetch: bool = True                              # resolve hub models to check a template (a run does)


@dataclass
class Peer:
    """One peer: its table, how it picks the step kind, and its readers for the keys marked `read`."""

    name: str                                     # LLaMA-Factory
    slug: str                                     # llamafactory (export-config --to)
    table: list[Key]
    kind_of: Callable[[dict], str]
    read: Callable[[dict, Context], dict]         # the `read` keys -> settings (may hold `model`)
    model_key: str

    def keys(self) -> dict[str, Key]:
        out = {}
        for key in self.table:
            out[key.name] = key
            out.update({alias: key for alias in key.aliases})
        return out


@dataclass
class Imported:
    recipe: dict
    peer: str
    ignored: list[str]

    def header_line(self) -> str:
        shown = ", ".join(self.ignored) if self.ignored else "none"
        return f"read as {self.peer}'s config; ignored (logging, speed or housekeeping only): {shown}"


def translate(peer: Peer, config: dict, source: str, *, name: Optional[str] = None, base: Optional[Path] = None,
              fetch: bool = True) -> Imported:
    """`config` (the peer's keys) -> Imported(recipe dict, ignored keys)."""
    if not isinstance(config, dict):
        raise Refused(f"{source}: expected a mapping of {peer.name} keys, got {type(config).__name__}")
    known = peer.keys()
    unknown = [k for k in config if k not in known]
    if unknown:
        raise Refused(f"{source}: {peer.name} key {unknown[0]!r} is not in swiftbox's mapping table "
                      f"(docs/migrating.md lists every key it maps, ignores or refuses); remove it or write a "
                      f"swiftbox recipe" + (f" (+{len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    if config.get(peer.model_key) in (None, ""):
        raise Refused(f"{source}: {peer.name} key {peer.model_key!r} is missing: the model to train")
    try:
        return _translate(peer, config, source, name, base, fetch)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:   # a value of the wrong shape: bad input
        raise Refused(f"{source}: {peer.name}: {' '.join(str(exc).split()) or type(exc).__name__}") from None


def _translate(peer: Peer, config: dict, source: str, name: Optional[str], base: Optional[Path],
               fetch: bool) -> Imported:
    kind = peer.kind_of(config)
    ctx = Context(peer=peer.name, source=source, kind=kind, base=base or Path.cwd(), fetch=fetch)
    settings: dict[str, Any] = {}
    ignored: list[str] = []
    known = peer.keys()
    present = {known[k].name: v for k, v in config.items()}
    for key in peer.table:
        given = key.name in present
        value = present[key.name] if given else key.default_for(config)
        if not given and value is ABSENT:
            continue
        if key.kinds and kind not in key.kinds:
            if given and value is not None:
                ignored.append(f"{key.name} (no effect in {kind})")
            continue
        if key.how == IGNORE:
            if given:
                ignored.append(key.name)
        elif key.how == REFUSE:
            if given and not any(_same(value, ok) for ok in key.accept):
                raise Refused(f"{source}: {peer.name} {key.name} {_shown(value)}: {key.note}")
        elif key.how == MAP:
            try:
                converted = key.convert(value) if key.convert else value
            except ValueError as exc:
                raise Refused(f"{source}: {peer.name} {key.name}: {exc}") from None
            if converted is not ABSENT:
                set_path(settings, key.to, converted)
        elif key.how != READ:
            raise AssertionError(f"{peer.name} table: {key.name} has an unknown how {key.how!r}")
    merge(settings, peer.read(config, ctx))
    model = settings.pop("model", None)
    recipe = {"name": recipe_name(name or Path(source).stem), "model": model, "steps": [{kind: settings}]}
    return Imported(recipe=recipe, peer=peer.name, ignored=ignored)


def merge(settings: dict, more: dict) -> None:
    """Deep-merge `more` into `settings` (a reader's `lora: {targets}` joins the table's `lora: {rank}`)."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            merge(settings[key], value)
        else:
            settings[key] = value


def set_path(settings: dict, path: str, value: Any) -> None:
    node = settings
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def get_path(settings: dict, path: str, default: Any = ABSENT) -> Any:
    node: Any = settings
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def recipe_name(text: str) -> str:
    """A recipe name (runs/<name>/) from the peer file's name."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:64]
    return name if name and name[0].isalnum() else f"imported-{name}".strip("-")[:64] or "imported"


def _same(value: Any, ok: Any) -> bool:
    if isinstance(ok, str) and isinstance(value, str):
        return value.strip().lower() == ok.lower()
    if isinstance(ok, bool) or isinstance(value, bool):
        return value is ok or (isinstance(value, str) and value.strip().lower() == str(ok).lower())
    if isinstance(ok, (int, float)) and isinstance(value, (int, float, str)):
        try:
            return float(value) == float(ok)
        except ValueError:
            return False
    return value == ok


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def first_row(spec: str) -> dict:
    """The first row of a dataset file (the shape an exporter describes to the peer)."""
    from swiftbox.data.reading import read_file, split_spec

    path, _ = split_spec(spec)
    return read_file(path)[0]
