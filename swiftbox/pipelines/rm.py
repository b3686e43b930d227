"""Reward model from preference pairs, on TRL's RewardTrainer.

The model is the input's body with a new one-output head (AutoModelForSequenceClassification, num_labels=1),
trained so that score(prompt + chosen) > score(prompt + rejected) (Bradley-Terry). With lora/qlora/dora the
artifact is a PEFT adapter whose head is saved whole (modules_to_save); an input SFT adapter is merged in first.
The flow is the one every preference step shares (training/preference.py): pairs in any format DPO accepts,
split exactly as DPO splits them; the text scored is the generation prompt followed by the reply.
`eval_dataset` (pairs) gives the held-out pairwise accuracy. Load and score the artifact with
swiftbox.training.reward_model (GRPO's reward-model reward does). The step does not produce the next step's
model: a later step continues from the policy before it.
"""
from __future__ import annotations

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.steps import RmStep
from swiftbox.training.model import check_training, dtype_plan
from swiftbox.training.preference import Method, run_preference

METHOD = Method("rm", "reward model", reward_head=True, margin_key="margin", accuracy_key="accuracy",
                artifact="reward-model")


def check(cfg: RmStep, platform: Platform, input: str) -> None:
    """The training refusals; an input adapter is merged under the new head, so a new lora.init is fine here."""
    check_training(cfg, platform, input, reward_head=True)


def run(cfg: RmStep, ctx: StepContext) -> StepResult:
    return run_preference(cfg, ctx, METHOD, build)


def build(cfg: RmStep, tm, train, evals, args: dict, extra: list):
    from trl import RewardConfig, RewardTrainer

    config = RewardConfig(**args, max_length=cfg.max_length, center_rewards_coefficient=cfg.center_rewards)
    trainer = RewardTrainer(model=tm.model, args=config, processing_class=tm.tokenizer, train_dataset=train,
                            eval_dataset=evals, callbacks=extra)
    if cfg.method == "qlora":
        # TRL casts every trainable parameter of a 4-bit model to bf16; LoRA layers cast their input, the plain
        # score head does not, so keep it in the dtype the hidden states arrive in (float32 on a CPU)
        compute = trainer.model.get_input_embeddings().weight.dtype
        for name, param in trainer.model.named_parameters():
            if param.requires_grad and "modules_to_save" in name:
                param.data = param.data.to(compute)
    return trainer, {"head": "score (num_labels=1)", "score_with": "swiftbox.training.reward_model.score"}


PIPELINE = declare("rm", RmStep, produces_model=False, check=check, run=run, dtypes=dtype_plan,
                   distributed=True)
