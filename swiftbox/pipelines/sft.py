"""Supervised fine-tuning: LoRA / QLoRA / DoRA / full, on TRL's SFTTrainer.

The whole flow, top to bottom: check the method is possible here -> read and normalise the data ->
load the model (adapter / 4-bit / full) -> tokenize with the chat template (loss exactly on the assistant
replies as the template renders them, swiftbox.data.render; long prompts cut from the left) -> SFTTrainer
with padding-free packing (each batch flattened into one sequence, position_ids restarting per sample so
attention stays within each sample; families whose packed rows are not exact - linear attention, state-space,
convolution layers, registry.PACKING_NOT_EXACT - pad and group by length instead, said in the step header) ->
save the adapter (or full model), the loss curve and TensorBoard events into the step's work dir.
"""
from __future__ import annotations

import time

from swiftbox.compat import trl_scores_label_positions_only
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import SftStep
from swiftbox.training.model import check_training, dtype_plan


def check(cfg: SftStep, platform: Platform) -> None:
    """The training refusals; with streaming, a dataset that cannot be read lazily (not jsonl, path#N)."""
    check_training(cfg, platform)
    if cfg.streaming:
        from swiftbox.data.streaming import jsonl_files

        jsonl_files(cfg.dataset)


def run(cfg: SftStep, ctx: StepContext) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox import data

    rows = [] if cfg.streaming else data.load_sft(cfg.dataset, cfg.seed, cfg.max_row_chars)
    eval_rows = data.load_sft(cfg.eval_dataset, cfg.seed, cfg.max_row_chars) if cfg.eval_dataset else None

    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.training import callbacks, checkpoints, curves
    from swiftbox.training.model import load_for_training
    from swiftbox.training.outputs import log, run_figures, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype)
    data.use_chat_template(tm.tokenizer, cfg.chat_template)
    train, counts = _streamed(cfg, tm.tokenizer) if cfg.streaming else data.tokenize_sft(rows, tm.tokenizer,
                                                                                             cfg.max_length)
    if not train:
        raise UserError(f"dataset {cfg.dataset}: no row's reply fits in max_length {cfg.max_length}")
    if (counts.truncated or counts.dropped) and not cfg.streaming:
        log(f"sft: {counts.truncated} row(s) truncated from the left to max_length {cfg.max_length} (system prompt and "
            f"reply kept), {counts.dropped} dropped (reply alone longer than max_length)")
    evals = data.tokenize_sft(eval_rows, tm.tokenizer, cfg.max_length)[0] if eval_rows else None
    from swiftbox.training.lora_init import maybe_eva

    maybe_eva(cfg, tm, lambda: data.stream_sft(cfg.dataset, tm.tokenizer, cfg.max_length, counts=data.Counts(),
                                               max_row_chars=cfg.max_row_chars) if cfg.streaming else train, log)

    from swiftbox.training.arguments import describe_batching

    ckpt_dir = ctx.work_dir / "checkpoints"
    how = describe_batching(cfg, ctx.platform, model_type(tm.model))
    trainer = make_trainer(cfg, ctx, dtype, tm.model, tm.tokenizer, train, evals, ckpt_dir,
                           profile_callbacks(cfg, ctx)
                           + callbacks.callbacks(f"sft {cfg.method} ({how})", ctx.work_dir, is_main_process()))
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    with trl_scores_label_positions_only():
        output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    state = trainer.state

    callbacks.check_finite_loss("sft", output.training_loss, trainer.state.global_step)
    metrics = {"train_loss": round(float(output.training_loss), 6),
               **curves.first_last(state.log_history, "loss", "loss")}
    if evals:
        with trl_scores_label_positions_only():
            metrics["eval_loss"] = round(float(trainer.evaluate()["eval_loss"]), 6)
    tokens = state.num_input_tokens_seen - _tokens_at_start(trainer)
    metrics.update(batching=how, samples=counts.rows - counts.dropped if cfg.streaming else len(train),
                   dropped_rows=counts.dropped, truncated_rows=counts.truncated,
                   tokens_per_second=round(tokens / max(seconds, 1e-6), 1),
                   **run_figures(trainer, tm, ctx, seconds, resume))
    save_artifact(trainer, tm, ctx, selected=None)   # every rank: ZeRO-3 gathers collectively
    if is_main_process():
        if curves.plot(state.log_history, ctx.work_dir / "loss.png", ("loss", "eval_loss"), f"sft {cfg.method}"):
            metrics["loss_curve"] = "loss.png"
    artifact = "model" if cfg.method == "full" else "adapter"
    return step_result(metrics, artifact, tm, cfg, state.log_history)


def make_trainer(cfg, ctx, dtype, model, tokenizer, train, evals, ckpt_dir, extra_callbacks):
    """SFTTrainer over pre-tokenized rows ({input_ids, labels}); also what `bench sft` measures."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from swiftbox.training import callbacks
    from swiftbox.training.arguments import batching, common_args

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


def model_type(model) -> str:
    """The config.json model_type of a (PEFT-wrapped) model: what the packing policy keys on."""
    return str(getattr(getattr(model, "config", None), "model_type", "") or "")


def _streamed(cfg, tokenizer):
    """streaming: true - the rows as a stream read while training runs (swiftbox.data.stream_sft), and the
    counts it adds up as it goes (seen so far, when the metrics are taken)."""
    from swiftbox import data
    from swiftbox.training.streaming import stream_dataset

    counts = data.Counts()

    def make():
        return data.stream_sft(cfg.dataset, tokenizer, cfg.max_length, counts=counts, max_row_chars=cfg.max_row_chars)

    if next(data.stream_sft(cfg.dataset, tokenizer, cfg.max_length, counts=data.Counts(),
                            max_row_chars=cfg.max_row_chars), None) is None:
        return [], counts
    return stream_dataset(make, seed=cfg.seed, buffer=cfg.shuffle_buffer), counts


def _with_length(rows):
    return [dict(r, length=len(r["input_ids"])) for r in rows]


def _tokens_at_start(trainer) -> int:
    for cb in trainer.callback_handler.callbacks:
        if hasattr(cb, "tokens_start"):
            return cb.tokens_start
    return 0


PIPELINE = declare("sft", SftStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)
