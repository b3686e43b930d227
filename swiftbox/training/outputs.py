"""What a training step leaves behind: the adapter (or full model) and tokenizer in the work dir, and the
StepResult whose info goes into the manifest (artifact kind, base model, method, datasets, log history)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from swiftbox.contract import StepContext, StepResult
    from swiftbox.steps import TrainBase
    from swiftbox.training.model import TrainModel


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def save_artifact(trainer: Any, tm: TrainModel, ctx: StepContext, selected: Optional[list[str]]) -> None:
    """Adapter (or full model) + tokenizer into the work dir, safetensors only (the runner removes the
    checkpoints once the output is committed). A PiSSA / OLoRA adapter is saved converted to a plain LoRA, an rsLoRA
    one with its scaling stated the plain way (training/lora_init.py).

    Call it on every rank: under DeepSpeed ZeRO-3 / FSDP the weights are gathered collectively by
    `trainer.save_model`; only rank 0 writes files.
    """
    from swiftbox.training.distributed.ranks import is_main_process

    model = trainer.model
    model.config.use_cache = True            # training turned it off; inference wants it back
    if tm.save_dtype:                         # float32 master weights -> the compute dtype the manifest names
        from swiftbox.modeling.loading import torch_dtype

        model.to(torch_dtype(tm.save_dtype))
    from swiftbox.training import lora_init

    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        trainer.save_model(str(ctx.work_dir))     # (PiSSA / OLoRA are refused with sharding: steps.TrainBase)
        if is_main_process():
            lora_init.plain_scaling(ctx.work_dir)
    elif not is_main_process():
        return
    else:
        lora_init.save(model, ctx.work_dir, selected, getattr(tm, "initial_adapter", None))
    if is_main_process():
        tm.tokenizer.save_pretrained(str(ctx.work_dir))
        # the checkpoints stay until the runner has committed the output (a kill before that resumes from them)


def resumed_step(resume: Optional[str]) -> int | None:
    """The global step of the checkpoint a run resumed from (`.../checkpoint-120` -> 120), None for a fresh run."""
    return int(resume.rsplit("-", 1)[1]) if resume else None


def run_figures(trainer: Any, tm: TrainModel, ctx: StepContext, seconds: float, resume: Optional[str]) -> dict:
    """The figures every training step reports: steps, wall time, parameter counts, peak memory, resume point."""
    from swiftbox.training.model import trainable_parameters

    trainable, total = trainable_parameters(tm.model)
    return {"steps": trainer.state.global_step, "train_seconds": round(seconds, 2), "trainable_params": trainable,
            "total_params": total, "peak_memory_bytes": ctx.platform.max_memory_allocated(),
            "resumed_from_step": resumed_step(resume)}


def step_result(metrics: dict[str, Any], artifact: str, tm: TrainModel, cfg: TrainBase,
                log_history: list[dict]) -> StepResult:
    from swiftbox.contract import StepResult

    datasets = [cfg.dataset] if isinstance(cfg.dataset, str) else list(cfg.dataset)
    info = {"artifact": artifact, "method": cfg.method, "datasets": datasets,
            "log_history": [{k: v for k, v in e.items() if isinstance(v, (int, float))} for e in log_history]}
    if artifact == "adapter":
        info["base_model"] = tm.base_ref
        if cfg.method == "qlora":
            info["trained_on"] = "bitsandbytes nf4 base; merge onto the un-quantized base"
    if tm.continued:
        info["continued_from"] = tm.continued
    return StepResult(metrics=metrics, info=info)
