"""Preference alignment with DPO, on TRL's DPOTrainer.

Flow: check the method is possible here -> read the preference pairs (any accepted format) -> load the
model: a base model gets a fresh LoRA/DoRA adapter; an SFT adapter artifact is continued (loaded
trainable) -> swiftbox splits each pair itself (prompt = the generation prompt, chosen/rejected = only the
replies as the template renders them; long prompts cut from the left) -> DPOTrainer on those strings.
The reference policy is a frozen copy of the starting point: TRL
copies a pretrained "default" adapter into a "ref" adapter, so after SFT the reference is the SFT policy,
not the raw base. `ref_adapter:` replaces that copy with another adapter. Full fine-tuning keeps a frozen
copy of the starting model as reference.
"""
from __future__ import annotations

import copy
import time

from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import DpoStep
from swiftbox.training.model import check_training

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")


def check(cfg: DpoStep, platform: Platform) -> None:
    loss_types(cfg)
    if cfg.ref_adapter and cfg.method == "full":
        raise UserError("dpo.ref_adapter: a reference adapter needs an adapter method (lora, qlora, dora), not full")
    check_training(cfg, platform)


def loss_types(cfg: DpoStep) -> list[str]:
    types = [t.strip() for t in cfg.loss_type.split(",") if t.strip()]
    unknown = [t for t in types if t not in LOSS_TYPES]
    if unknown or not types:
        raise UserError(f"dpo.loss_type: unknown {', '.join(unknown) or 'empty value'}; "
                        f"expected one of {', '.join(LOSS_TYPES)}")
    return types


def run(cfg: DpoStep, ctx: StepContext) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox import data

    rows = data.load_dpo(cfg.dataset, cfg.seed, cfg.max_row_chars)

    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.training import callbacks, checkpoints, curves
    from swiftbox.training.arguments import common_args
    from swiftbox.training.model import load_for_training, trainable_parameters
    from swiftbox.training.outputs import log, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype)
    data.use_chat_template(tm.tokenizer, cfg.chat_template)
    pairs, counts = data.dpo_strings(rows, tm.tokenizer, cfg.max_length)
    dropped = counts.dropped
    if counts.truncated or dropped:
        log(f"dpo: {counts.truncated} pair(s) truncated from the left to max_length {cfg.max_length} (system prompt "
            f"and replies kept), {dropped} dropped (empty reply, or a reply alone longer than max_length)")
    if not pairs:
        raise UserError(f"dataset {cfg.dataset}: no pair has non-empty replies that fit in max_length "
                        f"{cfg.max_length}")

    ref_model = None
    if cfg.method == "full":
        ref_model = copy.deepcopy(tm.model).eval().requires_grad_(False)
    ckpt_dir = ctx.work_dir / "checkpoints"
    args = DPOConfig(**common_args(cfg, ctx, dtype, ckpt_dir), beta=cfg.beta, loss_type=loss_types(cfg),
                     max_length=cfg.max_length)
    trainer = DPOTrainer(model=tm.model, ref_model=ref_model, args=args, processing_class=tm.tokenizer,
                         train_dataset=Dataset.from_list(pairs),
                         callbacks=profile_callbacks(cfg, ctx)
                         + callbacks.callbacks(f"dpo {cfg.method}", ctx.work_dir, is_main_process()))
    callbacks.quiet(trainer)
    reference = "frozen copy of the starting model"
    if cfg.method != "full":
        reference = use_reference_adapter(trainer.model, cfg.ref_adapter, tm.continued)
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    history = trainer.state.log_history

    margins = curves.first_last(history, "rewards/margins", "reward_margin")
    callbacks.check_finite_loss("dpo", output.training_loss, trainer.state.global_step)
    metrics = {"train_loss": round(float(output.training_loss), 6), **margins}
    if margins:
        metrics["reward_margin"] = margins["reward_margin_last"]
    metrics.update(curves.first_last(history, "rewards/accuracies", "reward_accuracy"))
    metrics.update(curves.first_last(history, "loss", "loss"))
    trainable, total = trainable_parameters(tm.model)
    metrics.update(steps=trainer.state.global_step, pairs=len(pairs), dropped_pairs=dropped,
                   truncated_pairs=counts.truncated,
                   train_seconds=round(seconds, 2), trainable_params=trainable, total_params=total,
                   peak_memory_bytes=ctx.platform.max_memory_allocated(),
                   resumed_from_step=int(resume.rsplit("-", 1)[1]) if resume else None)
    save_artifact(trainer, tm, ctx, selected=None if cfg.method == "full" else ["default"])  # every rank
    if is_main_process():
        keys = ("loss", "rewards/margins", "rewards/accuracies")
        if curves.plot(history, ctx.work_dir / "loss.png", keys, f"dpo {cfg.method} (beta {cfg.beta})"):
            metrics["loss_curve"] = "loss.png"
    result = step_result(metrics, "model" if cfg.method == "full" else "adapter", tm, cfg, history)
    result.info["reference"] = reference
    return result


def use_reference_adapter(model, ref_adapter, continued) -> str:
    """Make the model's "ref" adapter the reference policy; returns what the reference is, in words."""
    if ref_adapter:
        from swiftbox.modeling.loading import resolve_spec

        spec = resolve_spec(ref_adapter)
        if not spec.adapters:
            raise UserError(f"dpo.ref_adapter {ref_adapter}: not an adapter directory (no adapter_config.json)")
        if "ref" in model.peft_config:
            model.delete_adapter("ref")
        model.load_adapter(str(spec.adapters[-1]), adapter_name="ref", is_trainable=False)
        model.set_adapter("default")
        return f"adapter {ref_adapter}"
    if "ref" in model.peft_config:
        return f"frozen copy of the adapter {continued}" if continued else "the base model (fresh adapter)"
    return "the base model (adapters disabled)"


PIPELINE = declare("dpo", DpoStep, produces_model=True, check=check, run=run)
