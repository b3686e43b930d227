"""Arriving from a peer: LLaMA-Factory / Axolotl YAML, ms-swift argument files and command lines read as swiftbox
recipes, and swiftbox runs written back as the peer's config (`export-config`).

One table per peer (llamafactory.py, axolotl.py, ms_swift.py: rows of table.Key) is the source of truth; engine.py
reads a peer config through it into a recipe dict that validates through swiftbox's own schema; export.py writes
the other way; docs.py renders the tables into docs/migrating.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from swiftbox.lazy import lazy_exports
from swiftbox.migrate.engine import Imported, Peer, translate

if TYPE_CHECKING:
    from swiftbox.migrate.ms_swift import COMMANDS, translate_argv

# ms-swift's command lines (`swift sft ...`), loaded lazily; with the functions below, the public surface
# (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it)
_EXPORTS = {"COMMANDS": "swiftbox.migrate.ms_swift", "translate_argv": "swiftbox.migrate.ms_swift"}


def peers() -> dict[str, Peer]:
    from swiftbox.migrate.axolotl import PEER as AXOLOTL
    from swiftbox.migrate.llamafactory import PEER as LLAMAFACTORY
    from swiftbox.migrate.ms_swift import PEER as MS_SWIFT

    return {p.slug: p for p in (LLAMAFACTORY, AXOLOTL, MS_SWIFT)}


def detect(data: object) -> Optional[Peer]:
    """The peer whose config `data` is, by content; None for a swiftbox recipe (it has `steps`) or anything else."""
    if not isinstance(data, dict) or "steps" in data:
        return None
    from swiftbox.migrate.axolotl import detect as axolotl_config
    from swiftbox.migrate.llamafactory import detect as llamafactory_config
    from swiftbox.migrate.ms_swift import detect as ms_swift_config

    found = {"llamafactory": llamafactory_config, "axolotl": axolotl_config, "ms-swift": ms_swift_config}
    return next((peers()[slug] for slug, test in found.items() if test(data)), None)


def import_config(data: dict, source: str, *, base: Optional[Path] = None, fetch: bool = True) -> Optional[Imported]:
    """A peer's config (already read from its file) as a swiftbox recipe; None when it is not a peer's."""
    peer = detect(data)
    return None if peer is None else translate(peer, data, source, base=base, fetch=fetch)


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["COMMANDS", "Imported", "Peer", "detect", "import_config", "peers", "translate", "translate_argv"]
