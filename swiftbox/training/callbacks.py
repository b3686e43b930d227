"""Trainer callbacks: a rich progress bar (loss, lr, tokens/s, ETA), TensorBoard events, and the finite-loss
guard that stops a diverged run (NaN/inf loss) before it can save an all-NaN model."""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from swiftbox.errors import SwiftboxError


class Diverged(SwiftboxError):
    """The training loss stopped being a finite number: the weights are garbage, nothing is committed (exit 1)."""


def check_finite_loss(step_kind: str, value, step) -> None:
    if value is not None and not math.isfinite(float(value)):
        raise Diverged(f"{step_kind}: the training loss became {float(value)} at step {step}; stopped, nothing was "
                       "written (lower learning_rate / lora.alpha, or check the data and dtype)")


class FiniteLoss(TrainerCallback):
    """Raises Diverged on the first logged non-finite loss. Runs on every rank (the logged loss is the
    all-reduced mean, so every rank stops together). Needs `logging_nan_inf_filter=False`, or transformers
    quietly leaves NaN steps out of the logged loss."""

    def __init__(self, step_kind: str):
        self.step_kind = step_kind

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "train_loss"):
            if logs and key in logs:
                check_finite_loss(self.step_kind, logs[key], state.global_step)


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
    guard = FiniteLoss(description.split()[0])
    return [guard, RichProgress(description), tensorboard(work_dir / "tensorboard")] if main else [guard]


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
