"""Arriving from a peer: LLaMA-Factory / Axolotl YAML, ms-swift argument files and command lines read as swiftbox
recipes, and swiftbox runs written back as the peer's config (`export-config`).

One table per peer (llamafactory.py, axolotl.py, ms_swift.py: rows of table.Key) is the source of truth; engine.py
reads a peer config through it into a recipe dict that validates through swiftbox's own schema; export.py writes
the other way; docs.py renders the tables into docs/migrating.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from swiftbox.migrate.engine import Imported, Peer, translate


def peers() -> dict[str, Peer]:
    from swiftbox.migrate import axolotl, llamafactory, ms_swift

    return {p.slug: p for p in (llamafactory.PEER, axolotl.PEER, ms_swift.PEER)}


def detect(data: object) -> Optional[Peer]:
    """The peer whose config `data` is, by content; None for a swiftbox recipe (it has `steps`) or anything else."""
    if not isinstance(data, dict) or "steps" in data:
        return None
    from swiftbox.migrate import axolotl, llamafactory, ms_swift

    for module in (llamafactory, axolotl, ms_swift):
        if module.detect(data):
            return module.PEER
    return None


def import_config(data: dict, source: str, *, base: Optional[Path] = None, fetch: bool = True) -> Optional[Imported]:
    """A peer's config (already read from its file) as a swiftbox recipe; None when it is not a peer's."""
    peer = detect(data)
    return None if peer is None else translate(peer, data, source, base=base, fetch=fetch)
