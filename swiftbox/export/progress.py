"""swiftbox's own progress for a quantize pass: decoder layers done / total, as training shows its steps.

The library's own progress (gptqmodel's per-module bars and log lines) goes to the run's log (swiftbox.logs);
this bar is drawn on the real terminal. In a pipe rich draws it once, when it stops: one line.
"""
from __future__ import annotations

import contextlib
from typing import IO, Callable, Iterator, Optional


@contextlib.contextmanager
def layer_progress(description: str, total: Optional[int], stream: IO[str]) -> Iterator[Callable[[int], None]]:
    """A rich bar "DESCRIPTION ━━━ done/total layers elapsed"; yields the per-layer callback (layer index)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("layers"), TimeElapsedColumn(), console=Console(file=stream), transient=False,
                        # rich would route sys.stdout/sys.stderr through this bar on a terminal: the library's prints
                        # must keep going to the file descriptors (the run's log while captured)
                        redirect_stdout=False, redirect_stderr=False)
    task = progress.add_task(description, total=total)
    done: set[int] = set()

    def on_layer(index: int) -> None:
        done.add(index)
        progress.update(task, completed=len(done))

    progress.start()
    try:
        yield on_layer
    finally:
        progress.stop()
