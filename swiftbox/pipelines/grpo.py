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
from pathlib import Path
from typing import Any

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.steps import GrpoStep
from swiftbox.training.flow import Curve, Trained, TrainingFlow
from swiftbox.training.model import TrainModel, check_training, dtype_plan
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


def check(cfg: GrpoStep, platform: Platform, input: str) -> None:
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
    check_training(cfg, platform, input)


class GrpoFlow(TrainingFlow[GrpoStep]):
    """grpo's part of the training flow (swiftbox/training/flow.py): prompts, rewards, GRPOTrainer."""

    kind = "grpo"
    labels_only = False

    def read(self) -> None:
        from swiftbox import data

        self.rows = data.load_grpo(self.cfg.dataset, self.cfg.seed, self.cfg.max_row_chars)

    def prepare(self, tm: TrainModel) -> None:
        from swiftbox import data
        from swiftbox.training import rewards
        from swiftbox.training.outputs import log

        cfg, platform = self.cfg, self.ctx.platform
        self.prompts, self.counts = data.grpo_prompts(self.rows, tm.tokenizer, cfg.max_length)
        if self.counts.truncated:
            log(f"grpo: {self.counts.truncated} prompt(s) truncated from the left to max_length {cfg.max_length}")
        self.references = [p["solution"] for p in self.prompts]
        self.reward_funcs = rewards.build(cfg.rewards, references=self.references,
                                          max_completion_length=cfg.max_completion_length,
                                          model_loader=lambda path: rewards.reward_model_scorer(path, platform))
        self.reference_scores = rewards.reference_scores(self.reward_funcs, [p["prompt"] for p in self.prompts],
                                                         self.references)

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        cfg = self.cfg
        ref_copy = None
        if cfg.method == "full" and cfg.beta > 0 and not (cfg.deepspeed or cfg.fsdp):
            ref_copy = copy.deepcopy(tm.model).eval().requires_grad_(False)   # the starting point, adapters merged
        common = {**self.args(checkpoints), "include_num_input_tokens_seen": False}  # TRL counts them
        args = GRPOConfig(**common, num_generations=cfg.num_generations,
                          max_completion_length=cfg.max_completion_length, beta=cfg.beta, temperature=cfg.temperature,
                          top_p=cfg.top_p, **loss_settings(cfg), reward_weights=cfg.reward_weights,
                          use_vllm=cfg.use_vllm, vllm_mode="colocate", log_completions=False, shuffle_dataset=True)
        trainer = GRPOTrainer(model=tm.model, reward_funcs=self.reward_funcs, args=args, processing_class=tm.tokenizer,
                              train_dataset=Dataset.from_list(self.prompts), callbacks=callbacks)
        if ref_copy is not None and trainer.ref_model is not None:
            # TRL would rebuild the reference from the config's path: the base, without adapters merged before
            trainer.ref_model = trainer.accelerator.prepare_model(ref_copy, evaluation_mode=True)
        return trainer

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        from swiftbox.training import curves
        from swiftbox.training.outputs import resumed_step

        cfg, history = self.cfg, run.history
        metrics: dict[str, Any] = {}
        for key, name in (("reward", "reward"), ("reward_std", "reward_std"), ("accuracy", "accuracy"), ("kl", "kl"),
                          ("completions/mean_length", "completion_length")):
            metrics.update(curves.first_last(history, key, name))
        for spec in cfg.rewards:
            name = parse_spec(spec).name
            metrics.update(curves.first_last(history, f"rewards/{name}/mean", f"reward_{name}"))
        metrics.update(self.reference_scores)
        steps = run.steps - (resumed_step(run.resume) or 0)
        metrics.update(prompts=len(self.prompts), truncated_prompts=self.counts.truncated,
                       num_generations=cfg.num_generations, steps_per_second=round(steps / max(run.seconds, 1e-6), 4))
        return metrics

    def curve(self) -> Curve:
        return Curve(CURVE_KEYS, f"grpo {self.cfg.method} (beta {self.cfg.beta})", "reward_curve")

    def info(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        cfg = self.cfg
        info: dict[str, Any] = {"grpo_loss": loss_settings(cfg),
                                "rewards": [{"spec": s, "weight": w} for s, w in
                                            zip(cfg.rewards, cfg.reward_weights or [1.0] * len(cfg.rewards))]}
        if not any(r is not None for r in self.references):
            info["accuracy"] = "no reference answers in the data"
        return info


def run(cfg: GrpoStep, ctx: StepContext) -> StepResult:
    return GrpoFlow(cfg, ctx).run()


PIPELINE = declare("grpo", GrpoStep, produces_model=True, check=check, run=run, dtypes=dtype_plan, distributed=True)
