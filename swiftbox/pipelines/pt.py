"""Continued pre-training on raw text: LoRA / QLoRA / DoRA / full, on the same trainer flow as sft.

The flow: read the documents (.txt paragraphs, jsonl `text`, directories of them; lazily with streaming) ->
load the model as sft does -> tokenize each document, end it with the tokenizer's eos and pack the stream into
blocks of `block_size` tokens, every token a label (no masks). The model types the registry lists as not packing
exactly (catalog.presets.PACKING_NOT_EXACT: Jamba / Bamba / Zamba2 and pure state-space models, Kimi-Linear,
gpt-oss, GLM-5's sparse attention, custom-code families) get one document per row instead, cut to `block_size` and
padded - the step says which at its start. The hybrid families whose mixers swiftbox runs per packed sample
(Qwen3.5, Qwen3-Next, OLMo-hybrid, LFM2, Falcon-H1, Nemotron-H, Granite 4: compat.hybrid_mixers_per_sample) pack.
Perplexity on a held-out slice
(eval_dataset, else the first `heldout` documents, never trained on) is measured before and after training and
goes into the manifest.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.steps import PtStep
from swiftbox.training.flow import Trained, TrainingFlow
from swiftbox.training.model import TrainModel, check_training


class PtFlow(TrainingFlow[PtStep]):
    """pt's part of the training flow (swiftbox/training/flow.py): raw text, packed or one document per row."""

    kind = "pt"
    chat_template = False
    save_all_adapters = True

    def read(self) -> None:
        self.heldout, self.skip = _heldout(self.cfg)

    def prepare(self, tm: TrainModel) -> None:
        from swiftbox.catalog.presets import PACKING_NOT_EXACT, packing_policy
        from swiftbox.data import texts
        from swiftbox.training.lora_init import maybe_eva
        from swiftbox.training.outputs import log

        cfg, skip = self.cfg, self.skip
        model_type = str(getattr(tm.model.config, "model_type", "") or "")
        self.packed = packed = packing_policy(model_type) == "exact"
        if packed:
            log(f"pt: documents joined with eos and packed into blocks of {cfg.block_size} tokens")
        else:
            log(f"pt: packing is not exact on {model_type} ({PACKING_NOT_EXACT[model_type]}): one document per row, "
                f"cut to {cfg.block_size} tokens and padded")
        rows_of = texts.pack if packed else texts.one_per_row
        encode = texts.token_ids(tm.tokenizer)
        self.counts = counts = texts.TextCounts()

        def make(tally: texts.TextCounts | None = None) -> Any:
            docs = itertools.islice(texts.documents(cfg.dataset, cfg.max_row_chars), skip, None)
            return rows_of(docs, encode, cfg.block_size, tally)

        if cfg.streaming:
            from swiftbox.training.streaming import stream_dataset

            if next(make(), None) is None:
                raise UserError(f"dataset {cfg.dataset}: no text left to train on after the {skip} held-out "
                                "document(s)")
            self.train: Any = stream_dataset(lambda: make(counts), seed=cfg.seed, buffer=cfg.shuffle_buffer)
        else:
            self.train = list(make(counts))
            if not self.train:
                raise UserError(f"dataset {cfg.dataset}: no text left to train on after the {skip} held-out "
                                "document(s)")
        train = self.train
        eva_rows: Callable[[], Any] = make if cfg.streaming else (lambda: train)
        maybe_eva(cfg, tm, eva_rows, log)
        self.before = _perplexity(tm, self.heldout)

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        from swiftbox.pipelines.sft import make_trainer

        return make_trainer(self.cfg, self.ctx, self.dtype, tm.model, tm.tokenizer, self.train, None, checkpoints,
                            callbacks)

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        from swiftbox.training import curves
        from swiftbox.training.outputs import log

        cfg, counts, heldout = self.cfg, self.counts, self.heldout
        after = _perplexity(tm, heldout)
        metrics: dict[str, Any] = {
            **curves.first_last(run.history, "loss", "loss"),
            "rows": "packed blocks" if self.packed else "one document per row", "block_size": cfg.block_size,
            "train_documents": counts.documents, "train_tokens": counts.tokens, "train_rows": counts.blocks,
            "truncated_documents": counts.truncated, "heldout_documents": len(heldout)}
        if cfg.streaming:
            metrics["streaming"] = "train_* count what was read from the stream (the shuffle buffer reads ahead)"
        if heldout:
            metrics.update(perplexity_before=round(self.before, 4), perplexity_after=round(after, 4))
            log(f"pt: held-out perplexity {self.before:.3f} -> {after:.3f} ({len(heldout)} document(s))")
        return metrics


def run(cfg: PtStep, ctx: StepContext) -> StepResult:
    return PtFlow(cfg, ctx).run()


def check(cfg: PtStep, platform: Platform, input: str) -> None:
    """sft's refusals, and a dataset that is no raw text (missing, or not .txt / .jsonl) before any output."""
    from swiftbox.data import texts

    check_training(cfg, platform, input, row_files=False)
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


def _perplexity(tm: TrainModel, heldout: list[str]) -> float:
    """Held-out perplexity with dropout off (the trainer switches training mode back on itself)."""
    if not heldout:
        return float("nan")
    from swiftbox.catalog.scoring import perplexity

    was_training = tm.model.training
    tm.model.eval()
    try:
        return perplexity(tm.model, tm.tokenizer, heldout)
    finally:
        tm.model.train(was_training)


PIPELINE = declare("pt", PtStep, produces_model=True, check=check, run=run, distributed=True)
