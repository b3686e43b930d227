"""GRPO with verifiable rewards, on TRL's GRPOTrainer.

Flow: check (reward specs: the user's Python file imported, a reward model's directory present; vLLM rollouts
only where the platform has TRL's colocate mode; the method possible here) -> read prompts from any SFT/eval
format (prompt = the conversation before the last assistant turn, rendered with the template's generation
prompt; reference = that reply, or an answer / solution column) -> load the model as sft/dpo do (an SFT adapter
artifact is continued) -> every reward run once on the reference answers (a wrong shape or NaN stops here, not
after the first rollout) -> GRPOTrainer: `num_generations` completions per prompt sampled by the model's own
generate (or vLLM colocate), rewards, group-normalised advantages, KL `beta` to the starting policy (the adapter
as it was, or a frozen copy for full fine-tuning) -> the adapter/model, reward/accuracy/KL curves, metrics.
"""
from __future__ import annotations

import copy
import time

from swiftbox.device import Platform
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import GrpoStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.rewards import check_spec, parse_spec

CURVE_KEYS = ("reward", "accuracy", "kl", "completions/mean_length")
# loss_type -> (TRL loss_type, importance_sampling_level); gspo and luspo weigh whole sequences
TRL_LOSS = {"gspo": ("grpo", "sequence"), "luspo": ("luspo", "sequence")}


def loss_settings(cfg: GrpoStep) -> dict:
    """The GRPOConfig fields `loss_type` and its knobs stand for (what the manifest records as `grpo_loss`)."""
    loss, level = TRL_LOSS.get(cfg.loss_type, (cfg.loss_type, "token"))
    gspo = cfg.loss_type == "gspo"
    epsilon = cfg.epsilon if cfg.epsilon is not None else (3e-4 if gspo else 0.2)
    high = cfg.epsilon_high if cfg.epsilon_high is not None else (4e-4 if gspo and cfg.epsilon is None else None)
    scale = cfg.scale_rewards or ("none" if cfg.loss_type == "dr_grpo" else "group")
    return {"loss_type": loss, "importance_sampling_level": level, "epsilon": epsilon, "epsilon_high": high,
            "scale_rewards": scale, "mask_truncated_completions": cfg.mask_truncated_completions}


def trl_loss_types() -> set[str]:
    """The loss types the installed TRL's GRPOConfig documents ("Supported values are 'grpo', 'dr_grpo', ...")."""
    import re

    from trl import GRPOConfig

    text = GRPOConfig.__dataclass_fields__["loss_type"].metadata.get("help", "")
    listed = text.split("Supported values are", 1)[1].split(". ", 1)[0] if "Supported values are" in text else ""
    return set(re.findall(r"'(\w+)'", listed))


def check(cfg: GrpoStep, platform: Platform) -> None:
    for text in cfg.rewards:
        check_spec(parse_spec(text))
    loss = loss_settings(cfg)["loss_type"]
    offered = trl_loss_types()
    if offered and loss not in offered:
        from swiftbox.errors import Unsupported
        from swiftbox.versions import package_version

        raise Unsupported(f"grpo.loss_type {cfg.loss_type}: the installed TRL {package_version('trl')} has no "
                          f"{loss} loss (it offers {', '.join(sorted(offered))}); upgrade trl or pick one of those")
    if cfg.epsilon_high is not None and cfg.epsilon_high < loss_settings(cfg)["epsilon"] and loss != "cispo":
        from swiftbox.errors import UserError

        raise UserError(f"grpo.epsilon_high {cfg.epsilon_high} is below epsilon {loss_settings(cfg)['epsilon']}; the "
                        "upper clipping range is at least the lower one (DAPO's clip-higher: 0.28 over 0.2)")
    if cfg.use_vllm:
        platform.require("vllm-colocate")
    check_training(cfg, platform)


def run(cfg: GrpoStep, ctx: StepContext) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox import data

    rows = data.load_grpo(cfg.dataset, cfg.seed, cfg.max_row_chars)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.training import callbacks, checkpoints, curves, rewards
    from swiftbox.training.arguments import common_args
    from swiftbox.training.model import load_for_training
    from swiftbox.training.outputs import log, resumed_step, run_figures, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype)
    data.use_chat_template(tm.tokenizer, cfg.chat_template)
    prompts, counts = data.grpo_prompts(rows, tm.tokenizer, cfg.max_length)
    if counts.truncated:
        log(f"grpo: {counts.truncated} prompt(s) truncated from the left to max_length {cfg.max_length}")
    references = [p["solution"] for p in prompts]
    reward_funcs = rewards.build(cfg.rewards, references=references, max_completion_length=cfg.max_completion_length,
                                 model_loader=lambda path: rewards.reward_model_scorer(path, ctx.platform))
    reference_scores = rewards.reference_scores(reward_funcs, [p["prompt"] for p in prompts], references)

    ref_copy = None
    if cfg.method == "full" and cfg.beta > 0 and not (cfg.deepspeed or cfg.fsdp):
        ref_copy = copy.deepcopy(tm.model).eval().requires_grad_(False)   # the starting point, adapters merged
    ckpt_dir = ctx.work_dir / "checkpoints"
    common = {**common_args(cfg, ctx, dtype, ckpt_dir), "include_num_input_tokens_seen": False}  # TRL counts them
    args = GRPOConfig(**common, num_generations=cfg.num_generations,
                      max_completion_length=cfg.max_completion_length, beta=cfg.beta, temperature=cfg.temperature,
                      top_p=cfg.top_p, **loss_settings(cfg), reward_weights=cfg.reward_weights,
                      use_vllm=cfg.use_vllm, vllm_mode="colocate", log_completions=False, shuffle_dataset=True)
    trainer = GRPOTrainer(model=tm.model, reward_funcs=reward_funcs, args=args, processing_class=tm.tokenizer,
                          train_dataset=Dataset.from_list(prompts),
                          callbacks=profile_callbacks(cfg, ctx)
                          + callbacks.callbacks(f"grpo {cfg.method}", ctx.work_dir, is_main_process()))
    callbacks.quiet(trainer)
    if ref_copy is not None and trainer.ref_model is not None:
        # TRL would rebuild the reference from the config's path: the base, without adapters merged before
        trainer.ref_model = trainer.accelerator.prepare_model(ref_copy, evaluation_mode=True)
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    history = trainer.state.log_history

    callbacks.check_finite_loss("grpo", output.training_loss, trainer.state.global_step)
    metrics: dict = {"train_loss": round(float(output.training_loss), 6)}
    for key, name in (("reward", "reward"), ("reward_std", "reward_std"), ("accuracy", "accuracy"), ("kl", "kl"),
                      ("completions/mean_length", "completion_length")):
        metrics.update(curves.first_last(history, key, name))
    for spec in cfg.rewards:
        name = parse_spec(spec).name
        metrics.update(curves.first_last(history, f"rewards/{name}/mean", f"reward_{name}"))
    metrics.update(reference_scores)
    steps = trainer.state.global_step - (resumed_step(resume) or 0)
    metrics.update(prompts=len(prompts), truncated_prompts=counts.truncated, num_generations=cfg.num_generations,
                   steps_per_second=round(steps / max(seconds, 1e-6), 4),
                   **run_figures(trainer, tm, ctx, seconds, resume))
    save_artifact(trainer, tm, ctx, selected=None if cfg.method == "full" else ["default"])  # every rank
    if is_main_process():
        if curves.plot(history, ctx.work_dir / "loss.png", CURVE_KEYS, f"grpo {cfg.method} (beta {cfg.beta})"):
            metrics["reward_curve"] = "loss.png"
    result = step_result(metrics, "model" if cfg.method == "full" else "adapter", tm, cfg, history)
    result.info["grpo_loss"] = loss_settings(cfg)
    result.info["rewards"] = [{"spec": s, "weight": w} for s, w in
                              zip(cfg.rewards, cfg.reward_weights or [1.0] * len(cfg.rewards))]
    if not any(r is not None for r in references):
        result.info["accuracy"] = "no reference answers in the data"
    return result


PIPELINE = declare("grpo", GrpoStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)
