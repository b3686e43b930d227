"""Preference alignment with DPO, on TRL's DPOTrainer.

Flow (training/preference.py, shared with kto, orpo, simpo and rm): check the method is possible here -> read
the preference pairs (any accepted format) -> load the model: a base model gets a fresh LoRA/DoRA adapter; an
SFT adapter artifact is continued (loaded trainable) -> swiftbox splits each pair itself (prompt = the generation
prompt, chosen/rejected = only the replies as the template renders them; long prompts cut from the left) ->
DPOTrainer on those strings.
The reference policy is a frozen copy of the starting point: TRL
copies a pretrained "default" adapter into a "ref" adapter, so after SFT the reference is the SFT policy,
not the raw base. `ref_adapter:` replaces that copy with another adapter. Full fine-tuning keeps a frozen
copy of the starting model as reference.
"""
from __future__ import annotations

import copy

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.steps import DPO_LOSSES, DpoStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.preference import Method, check_ref_adapter, reference, run_preference

LOSS_TYPES = DPO_LOSSES      # the schema's closed list (swiftbox/steps.py DpoLoss)


def check(cfg: DpoStep, platform: Platform, input: str) -> None:
    loss_types(cfg)
    check_ref_adapter("dpo", cfg)
    check_training(cfg, platform, input)


def loss_types(cfg: DpoStep) -> list[str]:
    types = [t.strip() for t in cfg.loss_type.split(",") if t.strip()]
    unknown = [t for t in types if t not in LOSS_TYPES]
    if unknown or not types:
        raise UserError(f"dpo.loss_type: unknown {', '.join(unknown) or 'empty value'}; "
                        f"expected one of {', '.join(LOSS_TYPES)}")
    return types


def run(cfg: DpoStep, ctx: StepContext) -> StepResult:
    return run_preference(cfg, ctx, Method("dpo", f"dpo (beta {cfg.beta})"), build)


def build(cfg: DpoStep, tm, train, evals, args: dict, extra: list):
    from trl import DPOConfig, DPOTrainer

    from swiftbox.compat import trl_pretokenized
    from swiftbox.training.preference import exact_ids

    ref_model = copy.deepcopy(tm.model).eval().requires_grad_(False) if cfg.method == "full" else None
    config = DPOConfig(**args, beta=cfg.beta, loss_type=loss_types(cfg), max_length=cfg.max_length)
    train, evals = (exact_ids(d, tm.tokenizer, ("chosen", "rejected")) for d in (train, evals))
    with trl_pretokenized(DPOTrainer):
        trainer = DPOTrainer(model=tm.model, ref_model=ref_model, args=config, processing_class=tm.tokenizer,
                             train_dataset=train, eval_dataset=evals, callbacks=extra)
    return trainer, {"reference": reference("dpo", trainer, cfg, tm.continued)}


PIPELINE = declare("dpo", DpoStep, produces_model=True, check=check, run=run, dtypes=dtype_plan,
                   distributed=True)
