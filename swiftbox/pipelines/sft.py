"""Supervised fine-tuning: LoRA / QLoRA / DoRA / full, on TRL's SFTTrainer.

The whole flow, top to bottom: check the method is possible here -> read and normalise the data ->
load the model (adapter / 4-bit / full) -> tokenize with the chat template (loss exactly on the assistant
replies as the template renders them, swiftbox.data.render; long prompts cut from the left) -> SFTTrainer
with padding-free packing (each batch flattened into one sequence, position_ids restarting per sample so
attention stays within each sample; families whose packed rows are not exact - linear attention, state-space,
convolution layers, registry.PACKING_NOT_EXACT - pad and group by length instead, said in the step header) ->
save the adapter (or full model), the loss curve and TensorBoard events into the step's work dir. The steps
around the data are the training flow every training step shares (swiftbox/training/flow.py); `SftFlow` fills in
sft's part.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.steps import SftStep, TrainBase
from swiftbox.training.flow import Curve, Trained, TrainingFlow
from swiftbox.training.model import TrainModel, check_training, dtype_plan


def check(cfg: SftStep, platform: Platform, input: str) -> None:
    """The training refusals; with streaming, a dataset that cannot be read lazily (not jsonl, path#N)."""
    check_training(cfg, platform, input)
    if cfg.streaming:
        from swiftbox.data.streaming import jsonl_files

        jsonl_files(cfg.dataset)


class SftFlow(TrainingFlow[SftStep]):
    """sft's part of the training flow (swiftbox/training/flow.py)."""

    kind = "sft"
    save_all_adapters = True

    def read(self) -> None:
        from swiftbox import data

        cfg = self.cfg
        switches = cfg.chat_template_kwargs               # the step's template switches: every row's defaults
        self.rows = [] if cfg.streaming else data.with_switches(data.load_sft(cfg.dataset, cfg.seed,
                                                                              cfg.max_row_chars), switches)
        self.eval_rows = data.with_switches(data.load_sft(cfg.eval_dataset, cfg.seed, cfg.max_row_chars),
                                            switches) if cfg.eval_dataset else None

    def prepare(self, tm: TrainModel) -> None:
        from swiftbox import data
        from swiftbox.training.arguments import describe_batching, model_type
        from swiftbox.training.lora_init import maybe_eva
        from swiftbox.training.outputs import log

        cfg = self.cfg
        train, counts = _streamed(cfg, tm.tokenizer) if cfg.streaming else data.tokenize_sft(self.rows, tm.tokenizer,
                                                                                                 cfg.max_length)
        if not train:
            raise UserError(f"dataset {cfg.dataset}: no row's reply fits in max_length {cfg.max_length}")
        if (counts.truncated or counts.dropped) and not cfg.streaming:
            log(f"sft: {counts.truncated} row(s) truncated from the left to max_length {cfg.max_length} (system prompt "
                f"and reply kept), {counts.dropped} dropped (reply alone longer than max_length)")
        self.train, self.counts = train, counts
        self.evals = data.tokenize_sft(self.eval_rows, tm.tokenizer, cfg.max_length)[0] if self.eval_rows else None
        maybe_eva(cfg, tm, lambda: data.stream_sft(cfg.dataset, tm.tokenizer, cfg.max_length, counts=data.Counts(),
                                                   max_row_chars=cfg.max_row_chars,
                                                   switches=cfg.chat_template_kwargs) if cfg.streaming else train, log)
        self.how = describe_batching(cfg, self.ctx.platform, model_type(tm.model))

    def progress_title(self) -> str:
        return f"sft {self.cfg.method} ({self.how})"

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        return make_trainer(self.cfg, self.ctx, self.dtype, tm.model, tm.tokenizer, self.train, self.evals,
                            checkpoints, callbacks)

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        from swiftbox.training import curves

        cfg, counts = self.cfg, self.counts
        metrics: dict[str, Any] = curves.first_last(run.history, "loss", "loss")
        if self.evals:
            with self.scoring(tm.model):
                metrics["eval_loss"] = round(float(run.trainer.evaluate()["eval_loss"]), 6)
        tokens = run.trainer.state.num_input_tokens_seen - _tokens_at_start(run.trainer)
        metrics.update(batching=self.how, samples=counts.rows - counts.dropped if cfg.streaming else len(self.train),
                       dropped_rows=counts.dropped, truncated_rows=counts.truncated,
                       tokens_per_second=round(tokens / max(run.seconds, 1e-6), 1))
        return metrics

    def curve(self) -> Curve:
        return Curve(("loss", "eval_loss"), f"sft {self.cfg.method}")


def run(cfg: SftStep, ctx: StepContext) -> StepResult:
    return SftFlow(cfg, ctx).run()


def make_trainer(cfg: TrainBase, ctx: StepContext, dtype: str, model: Any, tokenizer: Any, train: Any,
                 evals: Optional[list[dict]], ckpt_dir: Path, extra_callbacks: list) -> Any:
    """SFTTrainer over pre-tokenized rows ({input_ids, labels}); also what `bench sft` measures."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from swiftbox.training import callbacks
    from swiftbox.training.arguments import batching, common_args, model_type

    packing, grouped = batching(cfg, ctx.platform, model_type(model))
    streamed = not isinstance(train, list)           # a stream (training.streaming) has no lengths to group by
    args = SFTConfig(
        **common_args(cfg, ctx, dtype, ckpt_dir),
        padding_free=packing,                      # flatten each batch: no pad tokens, per-sample position_ids
        packing=False,
        max_length=None if packing else cfg.max_length,   # rows are already truncated by data.tokenize_sft
        dataset_kwargs={"skip_prepare_dataset": True},
        train_sampling_strategy="group_by_length" if grouped and not streamed else "random",
        eval_strategy="epoch" if evals else "no",
    )
    trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer,
                         train_dataset=train if streamed else Dataset.from_list(_with_length(train)),
                         eval_dataset=Dataset.from_list(_with_length(evals)) if evals else None,
                         callbacks=extra_callbacks)
    callbacks.quiet(trainer)
    return trainer


def _streamed(cfg: SftStep, tokenizer: Any) -> tuple[Any, Any]:
    """streaming: true - the rows as a stream read while training runs (swiftbox.data.stream_sft), and the
    counts it adds up as it goes (seen so far, when the metrics are taken)."""
    from swiftbox import data
    from swiftbox.training.streaming import stream_dataset

    counts = data.Counts()

    def make():
        return data.stream_sft(cfg.dataset, tokenizer, cfg.max_length, counts=counts, max_row_chars=cfg.max_row_chars,
                               switches=cfg.chat_template_kwargs)

    if next(data.stream_sft(cfg.dataset, tokenizer, cfg.max_length, counts=data.Counts(),
                            max_row_chars=cfg.max_row_chars), None) is None:
        return [], counts
    return stream_dataset(make, seed=cfg.seed, buffer=cfg.shuffle_buffer), counts


def _with_length(rows: list[dict]) -> list[dict]:
    return [dict(r, length=len(r["input_ids"])) for r in rows]


def _tokens_at_start(trainer: Any) -> int:
    for cb in trainer.callback_handler.callbacks:
        if hasattr(cb, "tokens_start"):
            return cb.tokens_start
    return 0


PIPELINE = declare("sft", SftStep, produces_model=True, check=check, run=run, dtypes=dtype_plan, distributed=True)
