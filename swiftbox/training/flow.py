"""One flow for every training step: read -> model setup -> data -> trainer -> train -> save -> figures.

A training pipeline (sft, pt, grpo, gkd; dpo, kto, orpo, simpo and rm through training/preference.py) subclasses
`TrainingFlow` with its schema and fills in only what differs:

    read()                 the data that can be read (and refused) before the model loads
    prepare(tm)            the data on the loaded model's tokenizer (tokenize, count, refuse an empty set), EVA,
                           figures measured before training (pt's perplexity, gkd's KL to the teacher)
    trainer(tm, ckpt, cb)  the TRL / transformers trainer over that data, with the shared arguments (`args`)
    metrics(tm, run)       the step's figures after training (eval, margins, perplexity after, ...)
    info(tm, run)          what the manifest records beside the common training info
    curve()                which log keys the loss curve PNG plots, its title and metric name

and the flow does the rest, the same for every step: the quiet libraries, `load_for_training` (adapter / 4-bit /
full, or a reward head), the chat template, the callbacks (profile window, finite-loss guard, progress, TensorBoard),
resume from the last complete checkpoint, the peak-memory window, train, the finite-loss check, the figures every
run reports (steps, time, parameters, memory), the artifact saved on every rank (ZeRO-3 gathers collectively), the
curve and the StepResult (artifact kind, base model, datasets, log history).

The flow runs the same in one process and in each torchrun worker: the runner decides where it runs
(swiftbox/training/distributed/launch.py); here only `is_main_process()` decides who writes files by hand.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

from swiftbox.steps import TrainBase

if TYPE_CHECKING:
    from swiftbox.contract import StepContext, StepResult
    from swiftbox.training.model import TrainModel

T = TypeVar("T", bound=TrainBase)


@dataclass
class Trained:
    """What `trainer.train` left: the trainer, its TrainOutput, the wall time and the checkpoint it resumed from."""

    trainer: Any
    output: Any
    seconds: float
    resume: Optional[str]

    @property
    def history(self) -> list[dict]:
        return list(self.trainer.state.log_history)

    @property
    def steps(self) -> int:
        return int(self.trainer.state.global_step)


@dataclass(frozen=True)
class Curve:
    """The loss curve PNG (loss.png): the log keys it plots, its title, and the metric that names the file."""

    keys: tuple[str, ...]
    title: str
    metric: str = "loss_curve"


class TrainingFlow(Generic[T]):
    """One training step. Subclasses set `kind` and fill in the hooks; `run()` is the flow."""

    kind: str = "train"
    reward_head: bool = False      # rm: a one-output sequence-classification head instead of the LM head
    chat_template: bool = True     # pt reads raw text: no chat template to set
    labels_only: bool = True       # train with TRL scoring only the label positions (compat), sft/pt/preference
    unpadded: bool = False         # padded batches through the decoder as packed rows where exact (preference)
    save_all_adapters: bool = False  # save every adapter the model holds (sft/pt), not only "default"

    def __init__(self, cfg: T, ctx: StepContext) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.dtype = ctx.dtype(cfg.dtype)

    # -- what a step fills in ---------------------------------------------------------------
    def read(self) -> None:
        """The data that can be read and refused before the model loads."""

    def prepare(self, tm: TrainModel) -> None:
        """The data on the model's tokenizer, EVA, figures before training."""
        raise NotImplementedError

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        """The trainer over the prepared data; `callbacks` go to it (the flow's, first the profile window)."""
        raise NotImplementedError

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        """The step's own figures, after `train_loss` and before the figures every run reports."""
        return {}

    def info(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        """Manifest info beside the common training info (artifact, base model, method, datasets, log history)."""
        return {}

    def curve(self) -> Curve:
        return Curve(("loss",), f"{self.kind} {self.cfg.method}")

    def progress_title(self) -> str:
        """The progress bar's label; its first word names the step in the finite-loss guard's message."""
        return f"{self.kind} {self.cfg.method}"

    # -- shared pieces a step's hooks use -------------------------------------------------------
    def args(self, checkpoints: Path) -> dict[str, Any]:
        """The TrainingArguments every step shares (training/arguments.py)."""
        from swiftbox.training.arguments import common_args

        return common_args(self.cfg, self.ctx, self.dtype, checkpoints)

    def scoring(self, model: Any) -> AbstractContextManager[Any]:
        """Around train (and a step's own evaluate): TRL's fused LM heads work on memory-sized tiles
        (compat.trl_lm_head_tiles), fold each tile once with the hidden-state gradient where that is exact
        (compat.trl_lm_head_folded, training/lm_head.py) and score only the label positions."""
        from swiftbox.compat import trl_lm_head_folded, trl_lm_head_tiles, trl_scores_label_positions_only
        from swiftbox.training.lm_head import FoldedLogProb

        stack = ExitStack()
        stack.enter_context(trl_lm_head_tiles())
        stack.enter_context(trl_lm_head_folded(FoldedLogProb))
        if self.labels_only:
            stack.enter_context(trl_scores_label_positions_only())
        return stack

    @property
    def artifact(self) -> str:
        return "model" if self.cfg.method == "full" else "adapter"

    # -- the flow -----------------------------------------------------------------------------
    def run(self) -> StepResult:
        from swiftbox import data
        from swiftbox.training import callbacks, checkpoints, curves
        from swiftbox.training.distributed.ranks import is_main_process
        from swiftbox.training.model import load_for_training
        from swiftbox.training.outputs import log, run_figures, save_artifact, step_result
        from swiftbox.training.profile_window import profile_callbacks

        cfg, ctx = self.cfg, self.ctx
        self.read()                                        # bad data fails before any weights load
        callbacks.silence_libraries()
        ctx.platform.training_memory()                     # CPU: the allocator's set-up (device/cpu.py)
        from swiftbox.training.memory_policy import memory_callbacks
        from swiftbox.training.thread_policy import thread_callbacks

        cpu_policies = thread_callbacks(ctx.platform)  # CPU: the cores other processes leave free (device/threads.py)
        cpu_policies += memory_callbacks(ctx.platform)  # CPU trim mode: the heap's holes back past the run's peak
        tm = load_for_training(ctx.input, cfg, ctx.platform, self.dtype, reward_head=self.reward_head,
                               unpadded=self.unpadded)
        if self.chat_template:
            data.use_chat_template(tm.tokenizer, cfg.chat_template)
        self.prepare(tm)

        ckpt_dir = ctx.work_dir / "checkpoints"
        extra = profile_callbacks(cfg, ctx) + callbacks.callbacks(self.progress_title(), ctx.work_dir,
                                                                  is_main_process()) + cpu_policies
        trainer = self.trainer(tm, ckpt_dir, extra)
        callbacks.quiet(trainer)
        resume = checkpoints.resume_point(cfg, ckpt_dir, log)
        ctx.platform.reset_peak_memory()
        started = time.time()
        from swiftbox.compat import peft_lora_fused
        from swiftbox.training.lora_fused import lora_linear

        # each LoRA layer in one call: GEMMs only, dropout as the positions it drops (training/lora_fused.py)
        with self.scoring(tm.model), peft_lora_fused(tm.model, lora_linear):
            output = trainer.train(resume_from_checkpoint=resume)
        run = Trained(trainer, output, time.time() - started, resume)

        callbacks.check_finite_loss(self.kind, output.training_loss, run.steps)
        metrics: dict[str, Any] = {"train_loss": round(float(output.training_loss), 6)}
        metrics.update(self.metrics(tm, run))
        metrics.update(run_figures(trainer, tm, ctx, run.seconds, resume))
        selected = None if self.save_all_adapters or cfg.method == "full" else ["default"]
        save_artifact(trainer, tm, ctx, selected=selected)     # every rank: ZeRO-3 / FSDP gather collectively
        curve = self.curve()
        if is_main_process() and curves.plot(run.history, ctx.work_dir / "loss.png", curve.keys, curve.title):
            metrics[curve.metric] = "loss.png"
        result = step_result(metrics, self.artifact, tm, cfg, run.history)
        result.info.update(self.info(tm, run))
        return result


__all__ = ["Curve", "Trained", "TrainingFlow"]
