"""Checkpoints and resume. The trainer writes `checkpoint-N/` dirs under the step's work dir
(`<output>.partial/checkpoints`, a stable path); `trainer_state.json` is the last file written to a
checkpoint, so a checkpoint without it was cut short by a kill and is discarded before resuming."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Optional

STATE = "trainer_state.json"


def checkpoints(root: Path) -> list[tuple[int, Path]]:
    out = []
    for child in root.glob("checkpoint-*") if root.is_dir() else []:
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and child.is_dir():
            out.append((int(m.group(1)), child))
    return sorted(out)


def last_complete(root: Path) -> Optional[Path]:
    """The newest complete checkpoint under `root`; incomplete ones are removed."""
    best = None
    for _, path in checkpoints(root):
        if (path / STATE).is_file():
            best = path
        else:
            shutil.rmtree(path, ignore_errors=True)
    return best


def resume_point(cfg, root: Path, log) -> Optional[str]:
    if not cfg.resume:
        return None
    last = last_complete(root)
    log(f"resume: {'continuing from ' + last.name if last else 'no checkpoint yet, starting fresh'}")
    return str(last) if last else None
