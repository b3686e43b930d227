"""bench startup: wall time of `./launch.sh --help` and of the menu's first paint, side by side with
a bare `import torch`, which is what both would pay if torch were imported eagerly.

Prints one JSON line; `ratio` = import-torch time / --help time (how much the lazy imports save).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = str(ROOT / "launch.sh")


def timed(cmd: list[str], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def menu_first_paint(timeout: float = 20.0) -> float | None:
    """Seconds from starting `./launch.sh` in a tmux pane until a questionary prompt ('?') shows."""
    if not shutil.which("tmux"):
        return None
    sock, session = f"sb-bench-{uuid.uuid4().hex[:6]}", "bench"
    tmux = ["tmux", "-L", sock]
    start = time.perf_counter()
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", LAUNCH], check=True)
    try:
        while time.perf_counter() - start < timeout:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if any(line.lstrip().startswith("?") for line in screen.splitlines()):
                return time.perf_counter() - start
            time.sleep(0.02)
        return None
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def main() -> None:
    python = sys.executable
    result = {
        "bench": "startup",
        "help_s": round(timed([LAUNCH, "--help"]), 3),
        "python_bare_s": round(timed([python, "-c", "pass"]), 3),
        "import_torch_s": round(timed([python, "-c", "import torch"], repeat=3), 3),
        "menu_first_paint_s": None,
        "machine": f"{os.cpu_count()} cpu, {sys.platform}",
    }
    paint = menu_first_paint()
    result["menu_first_paint_s"] = round(paint, 3) if paint else None
    result["ratio"] = round(result["import_torch_s"] / result["help_s"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
