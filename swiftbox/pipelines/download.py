"""download step: fetch a model reference into the step's output (links to the hub cache; see swiftbox.hub)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from swiftbox.errors import UserError
from swiftbox.hub.snapshot import _local_files, _top_files, download_snapshot, link_files
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import DownloadStep


def run(cfg: DownloadStep, ctx: StepContext) -> StepResult:
    from swiftbox.hub.resolve import is_local_ref, resolve_model

    ref, work = ctx.input, Path(ctx.work_dir)
    info: dict[str, Any]
    entries: list[dict[str, Any]]
    is_toy = ref == "toy" or ref.startswith("toy:")
    if is_toy or (cfg.source in ("auto", "local") and is_local_ref(ref)):
        src = resolve_model(ref)
        kind = "toy" if is_toy else "local"
        files = _top_files(src) if kind == "toy" else _local_files(src, cfg.allow_pickle)
        entries = [{"path": f, "size": (src / f).stat().st_size, "sha256": None} for f in files]
        info = {"source": kind, "model_id": ref, "cache_path": str(src.resolve())}
        cache_hit = True
    elif cfg.source == "local":
        raise UserError(f"model {ref!r}: source: local needs an existing model directory")
    else:
        snap = download_snapshot(ref, source=cfg.source, revision=cfg.revision, include=cfg.include,
                                 exclude=cfg.exclude, allow_pickle=cfg.allow_pickle, cache_dir=cfg.cache_dir)
        src, entries, cache_hit = snap.path, snap.files, snap.cache_hit
        info = {"source": snap.source, "model_id": snap.repo_id, "revision": snap.revision, "commit": snap.commit,
                "endpoint": snap.endpoint, "cache_path": str(snap.path), "offline": snap.offline}
    used = link_files(src, [e["path"] for e in entries], work, cfg.link)
    size = sum(e["size"] or 0 for e in entries)
    return StepResult(metrics={"size_bytes": size, "files": len(entries), "cache_hit": cache_hit},
                      info={"artifact": "model", **info, "link": used, "files": entries})


PIPELINE = declare("download", DownloadStep, produces_model=True, run=run)
