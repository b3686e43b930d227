"""Trainer callbacks: a rich progress bar (loss, lr, tokens/s, ETA) and TensorBoard events."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


class RichProgress(TrainerCallback):
    """One progress bar per run, on the main process only; prints to stderr."""

    def __init__(self, description: str):
        self.description = description
        self.progress: Any = None
        self.task: Any = None
        self.started = 0.0
        self.tokens_start = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=Console(file=sys.stderr), transient=False)
        self.progress.start()
        self.task = self.progress.add_task(self.description, total=state.max_steps, completed=state.global_step,
                                           stats="")
        self.started = time.time()
        self.tokens_start = state.num_input_tokens_seen

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        elapsed = max(time.time() - self.started, 1e-6)
        tps = (state.num_input_tokens_seen - self.tokens_start) / elapsed
        parts = []
        for key, fmt in (("loss", "loss {:.4f}"), ("learning_rate", "lr {:.2e}"), ("rewards/margins", "margin {:.3f}")):
            if key in logs:
                parts.append(fmt.format(logs[key]))
        parts.append(f"{tps:,.0f} tok/s")
        self.progress.update(self.task, completed=state.global_step, stats="  ".join(parts))

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None


def tensorboard(log_dir: Path):
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    return TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(log_dir)))


def callbacks(description: str, work_dir: Path, main: bool) -> list:
    return [RichProgress(description), tensorboard(work_dir / "tensorboard")] if main else []


def quiet(trainer) -> None:
    """Drop transformers' dict-printing callback: the progress bar shows the figures instead."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def silence_libraries() -> None:
    """No per-map progress bars from datasets and no weight-loading bars: one rich bar is enough."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
