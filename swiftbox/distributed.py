"""Multi-process training: relaunch a training step under torchrun when it needs more than one process.

Contract used by the sft/dpo pipelines, at the very top of their `run(cfg, ctx)`:

    from swiftbox.distributed import maybe_relaunch
    result = maybe_relaunch(cfg, ctx)
    if result is not None:        # this process was the launcher; the workers did the work
        return result

and `is_main_process()` decides who writes artifacts (only rank 0).
"""
from __future__ import annotations

import os

from swiftbox.errors import NotBuilt


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def requested_processes(cfg, ctx) -> int:
    from swiftbox.device import normalise_devices

    devices = getattr(cfg, "devices", None) or ctx.header_devices
    ids = normalise_devices(devices)
    return (len(ids) if ids else 1) * max(1, getattr(cfg, "nnodes", 1))


def maybe_relaunch(cfg, ctx):
    """None when this process should train (single process, or already a torchrun worker)."""
    if world_size() > 1 or requested_processes(cfg, ctx) <= 1:
        return None
    raise NotBuilt("multi-device training (devices > 1) is not implemented yet")
