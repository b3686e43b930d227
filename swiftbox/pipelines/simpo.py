"""Preference alignment with SimPO, on TRL's CPOTrainer (loss_type "simpo").

SimPO's reward is the length-normalised log-probability of a reply times `beta`; the loss pushes the chosen
reward above the rejected one by the margin `gamma`. No reference model. `cpo_alpha` > 0 adds an SFT term on the
chosen replies (CPO-SimPO). TRL keeps CPO in trl.experimental; it is imported only through
swiftbox.compat.trl_experimental. The flow is the one every preference step shares (training/preference.py).
"""
from __future__ import annotations

from swiftbox.compat import trl_experimental, trl_experimental_as_given
from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.steps import SimpoStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.preference import Method, run_preference


def run(cfg: SimpoStep, ctx: StepContext) -> StepResult:
    return run_preference(cfg, ctx, Method("simpo", f"simpo (beta {cfg.beta}, gamma {cfg.gamma})"), build)


def build(cfg: SimpoStep, tm, train, evals, args: dict, extra: list):
    config_cls, trainer_cls = trl_experimental("cpo")
    args = {**args, "include_num_input_tokens_seen": "no"}     # its batches hold chosen_/rejected_input_ids
    config = config_cls(**args, loss_type="simpo", beta=cfg.beta, simpo_gamma=cfg.gamma, cpo_alpha=cfg.cpo_alpha,
                        max_length=cfg.max_length, max_completion_length=cfg.max_length)
    with trl_experimental_as_given("cpo"):      # the replies as the template renders them, nothing added
        trainer = trainer_cls(model=tm.model, args=config, processing_class=tm.tokenizer, train_dataset=train,
                              eval_dataset=evals, callbacks=extra)
    return trainer, {"reference": "none (SimPO)"}


PIPELINE = declare("simpo", SimpoStep, produces_model=True, check=check_training, run=run,
                   dtypes=dtype_plan, distributed=True)
