"""The transformers/TRL trainer arguments every training step shares, from a TrainBase config.

Precision flags come from the platform (use_cpu / bf16 / fp16); logging goes to our own callbacks
(rich progress, TensorBoard under <output>/tensorboard), not to tqdm. `batching` decides packing per step from the
step, the platform's measured default and the registry's packing policy for the model's config.json model_type.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from swiftbox.catalog.presets import PACKING_NOT_EXACT, packing_policy
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.steps import TrainBase
from swiftbox.training.distributed.args import training_arguments_extra

if TYPE_CHECKING:
    from swiftbox.contract import StepContext


def batching(cfg: TrainBase, platform: Platform, model_type: str = "") -> tuple[bool, bool]:
    """(packing, group_by_length) of an SFT step: what the step says, else the platform's measured default;
    grouping by length defaults on exactly when batches are padded (a flattened batch has no padding to save).
    Packing is never chosen for a model type whose packed rows are not exact (registry.PACKING_NOT_EXACT):
    those pad and group by length, and an explicit `packing: true` on one is refused (exit 2).
    Steps without packing (DPO) are padded and ungrouped."""
    if not hasattr(cfg, "packing"):
        return False, bool(getattr(cfg, "group_by_length", False))
    exact = packing_policy(model_type) == "exact"
    if cfg.packing and not exact:
        raise UserError(f"packing: true on {model_type}: packing is not exact for this family "
                        f"({PACKING_NOT_EXACT[model_type]}: packed samples can leak into each other); remove "
                        f"packing: (swiftbox pads and groups by length) "
                        f"or set packing: false")
    default = platform.sft_batching() == "packing" and exact
    packing = cfg.packing if cfg.packing is not None else default
    group: Optional[bool] = getattr(cfg, "group_by_length", None)
    grouped = group if group is not None else not packing
    return packing, grouped


def model_type(model: Any) -> str:
    """The config.json model_type of a (PEFT-wrapped) model: what the packing policy keys on."""
    return str(getattr(getattr(model, "config", None), "model_type", "") or "")


def unpadded_preference(platform: Platform, model_type: str = "") -> bool:
    """Whether a preference step's padded batches run without their padding (training/unpadded.py): where SFT
    packs by default on this platform and packing is exact for the family."""
    return platform.sft_batching() == "packing" and packing_policy(model_type) == "exact"


def describe_batching(cfg: TrainBase, platform: Platform, model_type: str = "") -> str:
    """The batching an SFT step runs, in words, for its header and `metrics.batching`: 'packing', 'padded,
    grouped by length' or 'padded', with the reason when the packing policy turned packing off."""
    packing, grouped = batching(cfg, platform, model_type)
    words = "packing" if packing else ("padded, grouped by length" if grouped else "padded")
    if not packing and getattr(cfg, "packing", None) is None and packing_policy(model_type) != "exact":
        words += f" (packing not exact on {model_type}: {PACKING_NOT_EXACT[model_type]})"
    return words


def common_args(cfg: TrainBase, ctx: StepContext, dtype: str, checkpoints: Path) -> dict[str, Any]:
    from swiftbox.training import tracking

    tracking.offline_defaults(cfg, checkpoints.parent)          # the step's work dir
    return dict(
        output_dir=str(checkpoints),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        warmup_steps=cfg.warmup_ratio,          # a float < 1 is a ratio of the total steps
        weight_decay=cfg.weight_decay,
        lr_scheduler_type=cfg.lr_scheduler,
        gradient_checkpointing=False,           # enabled on the model itself (see training.model)
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=2,
        logging_strategy="steps",
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        logging_nan_inf_filter=False,           # a NaN loss must show (callbacks.FiniteLoss stops the run on it)
        report_to=tracking.report_to(cfg),     # trackers through transformers' integrations (TensorBoard: ours)
        run_name=f"{getattr(ctx, 'recipe', 'swiftbox')}/{getattr(ctx, 'kind', 'train')}",   # trackers' run name
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        remove_unused_columns=False,
        **ctx.platform.training_args(dtype),
        **ctx.platform.training_kernels(),                # fused kernels where installed (CUDA: Liger)
        **training_arguments_extra(cfg, ctx.platform),   # ddp backend, deepspeed / fsdp
    )
