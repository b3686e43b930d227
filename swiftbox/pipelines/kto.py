"""Unpaired preference alignment with KTO, on TRL's KTOTrainer.

Rows are single completions labelled good (true) or bad (false): TRL's prompt/completion/label, ms-swift's
`messages` + `label`, LLaMA-Factory's `kto_tag`. The flow is the one every preference step shares
(training/preference.py): prompt and completion split exactly as DPO splits a pair. Like DPO, the reference
policy is a frozen copy of the starting point (an SFT adapter's "ref" copy, `ref_adapter:`, or for full
fine-tuning a frozen copy of the model).
"""
from __future__ import annotations

import copy

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.steps import KtoStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.preference import Method, check_ref_adapter, reference, run_preference


def check(cfg: KtoStep, platform: Platform, input: str) -> None:
    check_ref_adapter("kto", cfg)
    check_training(cfg, platform, input)


def run(cfg: KtoStep, ctx: StepContext) -> StepResult:
    return run_preference(cfg, ctx, Method("kto", f"kto (beta {cfg.beta})", unpaired=True), build)


def build(cfg: KtoStep, tm, train, evals, args: dict, extra: list):
    from trl import KTOConfig, KTOTrainer

    from swiftbox.compat import trl_pretokenized
    from swiftbox.training.preference import exact_ids

    ref_model = copy.deepcopy(tm.model).eval().requires_grad_(False) if cfg.method == "full" else None
    config = KTOConfig(**args, beta=cfg.beta, loss_type=cfg.loss_type, desirable_weight=cfg.desirable_weight,
                       undesirable_weight=cfg.undesirable_weight, max_length=cfg.max_length)
    train, evals = (exact_ids(d, tm.tokenizer, ("completion",)) for d in (train, evals))
    with trl_pretokenized(KTOTrainer):
        trainer = KTOTrainer(model=tm.model, ref_model=ref_model, args=config, processing_class=tm.tokenizer,
                             train_dataset=train, eval_dataset=evals, callbacks=extra)
    return trainer, {"reference": reference("kto", trainer, cfg, tm.continued)}


PIPELINE = declare("kto", KtoStep, produces_model=True, check=check, run=run, dtypes=dtype_plan,
                   distributed=True)
