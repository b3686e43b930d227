"""Which process this is in a torchrun job (RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them; one process
without them). Training code asks `is_main_process()` before writing a file by hand: only global rank 0 writes."""
from __future__ import annotations

import os


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """True on global rank 0 (and in a single process): the only one that writes artifacts."""
    return rank() == 0


__all__ = ["is_main_process", "local_rank", "rank", "world_size"]
