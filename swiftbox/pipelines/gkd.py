"""Knowledge distillation from a teacher (GKD, "On-Policy Distillation of Language Models"), on TRL's GKDTrainer
(trl.experimental.gkd, imported through swiftbox.compat).

Flow: check (the method possible here; a teacher given as a served URL is refused, exit 3) -> read SFT rows (any
SFT format) -> load the student as sft does (a fresh LoRA/DoRA adapter, an adapter artifact continued, or full) ->
tokenize with exact labels (the replies, as the template renders them; long prompts cut from the left) -> the
teacher: its tokenizer must be the student's (exit 2 before its weights load), then the model, frozen, its adapters
merged -> KL(teacher || student) on the replies of `probe_rows` rows -> GKDTrainer: with probability `lmbda` a
step trains on the student's own answers sampled from the prompts (on-policy), else on the dataset's replies (with
`seq_kd`, on the teacher's sampled answers); the loss is the generalized JSD (`beta`) between the teacher's and the
student's next-token distributions on the answer tokens -> KL after, the adapter/model, loss curve, manifest.
"""
from __future__ import annotations

import re
import time

from swiftbox.device import Platform
from swiftbox.errors import Unsupported, UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import GkdStep
from swiftbox.training.model import check_training, dtype_plan


def check(cfg: GkdStep, platform: Platform) -> None:
    if re.match(r"^[a-z][a-z0-9+.-]*://", cfg.teacher, re.IGNORECASE):
        raise Unsupported(f"gkd.teacher {cfg.teacher}: GKD needs the teacher's whole next-token distribution at every "
                          "answer token, which an OpenAI-compatible server does not return (at most top-20 logprobs; "
                          "TRL's server distillation needs its own `trl vllm-serve` teacher on CUDA); give the teacher "
                          "as a model reference (toy, a hub id, a local or artifact directory)")
    check_training(cfg, platform)


def run(cfg: GkdStep, ctx: StepContext) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox import data

    rows = data.load_sft(cfg.dataset, cfg.seed, cfg.max_row_chars)
    eval_rows = data.load_sft(cfg.eval_dataset, cfg.seed, cfg.max_row_chars) if cfg.eval_dataset else None

    from datasets import Dataset

    from swiftbox.compat import trl_experimental
    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.training import callbacks, checkpoints, curves, distill
    from swiftbox.training.arguments import common_args
    from swiftbox.training.lora_init import maybe_eva
    from swiftbox.training.model import load_for_training
    from swiftbox.training.outputs import log, run_figures, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype)
    data.use_chat_template(tm.tokenizer, cfg.chat_template)
    tokenized, counts = data.tokenize_sft(rows, tm.tokenizer, cfg.max_length)
    train, no_prompt = distill.with_prompts(tokenized)
    if not train:
        raise UserError(f"dataset {cfg.dataset}: no row has a prompt and a reply that fit in max_length "
                        f"{cfg.max_length}")
    if counts.truncated or counts.dropped or no_prompt:
        log(f"gkd: {counts.truncated} row(s) truncated from the left to max_length {cfg.max_length}, "
            f"{counts.dropped + no_prompt} dropped (reply alone longer than max_length, or no prompt left)")
    evals = distill.with_prompts(data.tokenize_sft(eval_rows, tm.tokenizer, cfg.max_length)[0])[0] if eval_rows \
        else None
    maybe_eva(cfg, tm, lambda: train, log)
    teacher = distill.load_teacher(cfg.teacher, cfg, ctx.platform, dtype, tm.tokenizer)
    distill.same_width(tm.model, teacher, cfg.teacher)
    pad = tm.tokenizer.pad_token_id if tm.tokenizer.pad_token_id is not None else tm.tokenizer.eos_token_id
    probe = (evals or train)[:cfg.probe_rows]
    before = distill.kl_to_teacher(tm.model, teacher, probe, pad)

    GKDConfig, GKDTrainer = trl_experimental("gkd")
    ckpt_dir = ctx.work_dir / "checkpoints"
    args = GKDConfig(**common_args(cfg, ctx, dtype, ckpt_dir), lmbda=cfg.lmbda, beta=cfg.beta,
                     temperature=cfg.temperature, seq_kd=cfg.seq_kd, max_new_tokens=cfg.max_new_tokens,
                     disable_dropout=True, max_length=cfg.max_length, packing=False,
                     dataset_kwargs={"skip_prepare_dataset": True}, eval_strategy="epoch" if evals else "no")
    trainer = GKDTrainer(model=tm.model, teacher_model=teacher, args=args, data_collator=distill.Collator(pad),
                         train_dataset=Dataset.from_list(train),
                         eval_dataset=Dataset.from_list(evals) if evals else None, processing_class=tm.tokenizer,
                         callbacks=profile_callbacks(cfg, ctx)
                         + callbacks.callbacks(f"gkd {cfg.method}", ctx.work_dir, is_main_process()))
    callbacks.quiet(trainer)
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    history = trainer.state.log_history
    callbacks.check_finite_loss("gkd", output.training_loss, trainer.state.global_step)
    after = distill.kl_to_teacher(tm.model, teacher, probe, pad)

    metrics: dict = {"train_loss": round(float(output.training_loss), 6), **curves.first_last(history, "loss", "loss")}
    if probe:
        metrics.update(teacher_kl_before=round(before, 6), teacher_kl_after=round(after, 6))
        log(f"gkd: KL(teacher || student) on the replies of {len(probe)} row(s): {before:.4f} -> {after:.4f}")
    if evals:
        metrics["eval_loss"] = round(float(trainer.evaluate()["eval_loss"]), 6)
    metrics.update(samples=len(train), dropped_rows=counts.dropped + no_prompt, truncated_rows=counts.truncated,
                   **run_figures(trainer, tm, ctx, seconds, resume))
    save_artifact(trainer, tm, ctx, selected=None if cfg.method == "full" else ["default"])   # every rank
    if is_main_process() and curves.plot(history, ctx.work_dir / "loss.png", ("loss", "eval_loss"),
                                         f"gkd {cfg.method} (lmbda {cfg.lmbda}, beta {cfg.beta})"):
        metrics["loss_curve"] = "loss.png"
    result = step_result(metrics, "model" if cfg.method == "full" else "adapter", tm, cfg, history)
    result.info.update(teacher=cfg.teacher, distillation={"lmbda": cfg.lmbda, "beta": cfg.beta, "seq_kd": cfg.seq_kd,
                                                          "temperature": cfg.temperature,
                                                          "max_new_tokens": cfg.max_new_tokens})
    return result


PIPELINE = declare("gkd", GkdStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)
