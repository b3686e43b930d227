"""Preference alignment with ORPO (odds-ratio preference optimisation), on TRL's ORPOTrainer.

ORPO adds an odds-ratio term (weight `beta`, the paper's lambda) to the SFT loss on the chosen replies, so it
needs no reference model and can start from a base model. TRL keeps the trainer in trl.experimental; it is
imported only through swiftbox.compat.trl_experimental. The flow is the one every preference step shares
(training/preference.py): pairs in any format DPO accepts, split exactly as DPO splits them.
"""
from __future__ import annotations

from swiftbox.compat import trl_experimental, trl_experimental_as_given
from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.steps import OrpoStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.preference import Method, run_preference


def run(cfg: OrpoStep, ctx: StepContext) -> StepResult:
    return run_preference(cfg, ctx, Method("orpo", f"orpo (lambda {cfg.beta})"), build)


def build(cfg: OrpoStep, tm, train, evals, args: dict, extra: list):
    config_cls, trainer_cls = trl_experimental("orpo")
    args = {**args, "include_num_input_tokens_seen": "no"}     # its batches hold chosen_/rejected_input_ids
    config = config_cls(**args, beta=cfg.beta, max_length=cfg.max_length, max_completion_length=cfg.max_length)
    with trl_experimental_as_given("orpo"):      # the replies as the template renders them, nothing added
        trainer = trainer_cls(model=tm.model, args=config, processing_class=tm.tokenizer, train_dataset=train,
                              eval_dataset=evals, callbacks=extra)
    return trainer, {"reference": "none (ORPO)"}


PIPELINE = declare("orpo", OrpoStep, produces_model=True, check=check_training, run=run,
                   dtypes=dtype_plan, distributed=True)
