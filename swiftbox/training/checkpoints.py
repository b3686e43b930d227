"""Checkpoints and resume. The trainer writes `checkpoint-N/` dirs under the step's work dir
(`<output>.partial/checkpoints`, a stable path); `trainer_state.json` is the last file written to a
checkpoint, so a checkpoint whose state is missing or does not parse (a kill mid-write) was cut short
and is discarded before resuming."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable, Optional

from swiftbox.steps import TrainBase

STATE = "trainer_state.json"


def checkpoints(root: Path) -> list[tuple[int, Path]]:
    out = []
    for child in root.glob("checkpoint-*") if root.is_dir() else []:
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and child.is_dir():
            out.append((int(m.group(1)), child))
    return sorted(out)


def complete(root: Path) -> list[Path]:
    """The complete checkpoints under `root`, oldest first; incomplete ones are removed."""
    good = []
    for _, path in checkpoints(root):
        if read_state(path) is not None:
            good.append(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    return good


def last_complete(root: Path) -> Optional[Path]:
    """The newest complete checkpoint under `root`; incomplete ones are removed."""
    good = complete(root)
    return good[-1] if good else None


def read_state(checkpoint: Path) -> Optional[dict]:
    """The checkpoint's trainer state, or None when it is missing, truncated or not a JSON object."""
    try:
        state = json.loads((checkpoint / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("global_step"), int) else None


def is_final(checkpoint: Path) -> bool:
    """Whether the checkpoint was saved at the run's last step. transformers, resumed from such a checkpoint,
    trains one step past max_steps (41/40), so it is never resumed from."""
    state = read_state(checkpoint) or {}
    planned = state.get("max_steps")
    return isinstance(planned, int) and planned > 0 and state["global_step"] >= planned


def resume_point(cfg: TrainBase, root: Path, log: Callable[[str], None]) -> Optional[str]:
    """The checkpoint to resume from (clamped: never one saved at the last step), or None to start fresh."""
    if not cfg.resume:
        return None
    good = complete(root)
    while good and is_final(good[-1]):
        log(f"resume: {good[-1].name} is the run's last step; redoing from the checkpoint before it")
        good.pop()
    last = good[-1] if good else None
    log(f"resume: {'continuing from ' + last.name if last else 'no checkpoint yet, starting fresh'}")
    return str(last) if last else None
