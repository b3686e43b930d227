"""Continued pre-training on raw text: LoRA / QLoRA / DoRA / full, on the same trainer flow as sft.

The flow: read the documents (.txt paragraphs, jsonl `text`, directories of them; lazily with streaming) ->
load the model as sft does -> tokenize each document, end it with the tokenizer's eos and pack the stream into
blocks of `block_size` tokens, every token a label (no masks). Model types on which packing is not exact
(linear attention / state-space / convolution layers, modeling.registry.packing_policy) get one document per
row instead, cut to `block_size` and padded - the step says which at its start. Perplexity on a held-out slice
(eval_dataset, else the first `heldout` documents, never trained on) is measured before and after training and
goes into the manifest.
"""
from __future__ import annotations

import itertools
import time

from swiftbox.compat import trl_scores_label_positions_only
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import PtStep
from swiftbox.training.model import check_training


def run(cfg: PtStep, ctx: StepContext) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox.data import texts

    heldout, skip = _heldout(cfg)

    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.modeling.registry import PACKING_NOT_EXACT, packing_policy
    from swiftbox.modeling.scoring import perplexity
    from swiftbox.pipelines.sft import make_trainer
    from swiftbox.training import callbacks, checkpoints, curves
    from swiftbox.training.model import load_for_training
    from swiftbox.training.outputs import log, run_figures, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype)
    model_type = str(getattr(tm.model.config, "model_type", "") or "")
    packed = packing_policy(model_type) == "exact"
    if packed:
        log(f"pt: documents joined with eos and packed into blocks of {cfg.block_size} tokens")
    else:
        log(f"pt: packing is not exact on {model_type} ({PACKING_NOT_EXACT[model_type]}): one document per row, cut "
            f"to {cfg.block_size} tokens and padded")
    rows_of = texts.pack if packed else texts.one_per_row
    encode = texts.token_ids(tm.tokenizer)
    counts = texts.TextCounts()

    def make(tally: texts.TextCounts | None = None):
        docs = itertools.islice(texts.documents(cfg.dataset, cfg.max_row_chars), skip, None)
        return rows_of(docs, encode, cfg.block_size, tally)

    if cfg.streaming:
        from swiftbox.training.streaming import stream_dataset

        if next(make(), None) is None:
            raise UserError(f"dataset {cfg.dataset}: no text left to train on after the {skip} held-out document(s)")
        train = stream_dataset(lambda: make(counts), seed=cfg.seed, buffer=cfg.shuffle_buffer)
    else:
        train = list(make(counts))
        if not train:
            raise UserError(f"dataset {cfg.dataset}: no text left to train on after the {skip} held-out document(s)")

    from swiftbox.training.lora_init import maybe_eva

    maybe_eva(cfg, tm, make if cfg.streaming else lambda: train, log)
    before = _perplexity(perplexity, tm, heldout)
    ckpt_dir = ctx.work_dir / "checkpoints"
    trainer = make_trainer(cfg, ctx, dtype, tm.model, tm.tokenizer, train, None, ckpt_dir,
                           profile_callbacks(cfg, ctx) + callbacks.callbacks(f"pt {cfg.method}", ctx.work_dir,
                                                                             is_main_process()))
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    with trl_scores_label_positions_only():
        output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    state = trainer.state
    callbacks.check_finite_loss("pt", output.training_loss, state.global_step)
    after = _perplexity(perplexity, tm, heldout)

    metrics = {"train_loss": round(float(output.training_loss), 6),
               **curves.first_last(state.log_history, "loss", "loss"),
               "rows": "packed blocks" if packed else "one document per row", "block_size": cfg.block_size,
               "train_documents": counts.documents, "train_tokens": counts.tokens, "train_rows": counts.blocks,
               "truncated_documents": counts.truncated, "heldout_documents": len(heldout)}
    if cfg.streaming:
        metrics["streaming"] = "train_* count what was read from the stream (the shuffle buffer reads ahead)"
    if heldout:
        metrics.update(perplexity_before=round(before, 4), perplexity_after=round(after, 4))
        log(f"pt: held-out perplexity {before:.3f} -> {after:.3f} ({len(heldout)} document(s))")
    metrics.update(**run_figures(trainer, tm, ctx, seconds, resume))
    save_artifact(trainer, tm, ctx, selected=None)
    if is_main_process() and curves.plot(state.log_history, ctx.work_dir / "loss.png", ("loss",), f"pt {cfg.method}"):
        metrics["loss_curve"] = "loss.png"
    return step_result(metrics, "model" if cfg.method == "full" else "adapter", tm, cfg, state.log_history)


def check(cfg: PtStep, platform: Platform) -> None:
    """sft's refusals, and a dataset that is no raw text (missing, or not .txt / .jsonl) before any output."""
    from swiftbox.data import texts

    check_training(cfg, platform)
    texts.text_files(cfg.dataset)
    if cfg.eval_dataset:
        texts.text_files(cfg.eval_dataset)


def _heldout(cfg: PtStep) -> tuple[list[str], int]:
    """(held-out documents, how many of the dataset's first documents training skips)."""
    from swiftbox.data import texts

    if cfg.eval_dataset:
        docs = list(texts.documents(cfg.eval_dataset, cfg.max_row_chars))
        if not docs:
            raise UserError(f"eval_dataset {cfg.eval_dataset}: holds no text")
        return docs, 0
    docs = list(itertools.islice(texts.documents(cfg.dataset, cfg.max_row_chars), cfg.heldout))
    return docs, len(docs)


def _perplexity(perplexity, tm, heldout: list[str]) -> float:
    """Held-out perplexity with dropout off (the trainer switches training mode back on itself)."""
    if not heldout:
        return float("nan")
    was_training = tm.model.training
    tm.model.eval()
    try:
        return perplexity(tm.model, tm.tokenizer, heldout)
    finally:
        tm.model.train(was_training)


PIPELINE = declare("pt", PtStep, produces_model=True, check=check, run=run)
