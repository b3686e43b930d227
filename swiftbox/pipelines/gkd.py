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
from pathlib import Path
from typing import Any

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import Unsupported, UserError
from swiftbox.steps import GkdStep
from swiftbox.training.flow import Curve, Trained, TrainingFlow
from swiftbox.training.model import TrainModel, check_training, dtype_plan


def check(cfg: GkdStep, platform: Platform, input: str) -> None:
    if re.match(r"^[a-z][a-z0-9+.-]*://", cfg.teacher, re.IGNORECASE):
        raise Unsupported(f"gkd.teacher {cfg.teacher}: GKD needs the teacher's whole next-token distribution at every "
                          "answer token, which an OpenAI-compatible server does not return (at most top-20 logprobs; "
                          "TRL's server distillation needs its own `trl vllm-serve` teacher on CUDA); give the teacher "
                          "as a model reference (toy, a hub id, a local or artifact directory)")
    check_training(cfg, platform, input)
    from swiftbox.training.distill import check_teacher

    check_teacher(cfg.teacher, input, trust_remote_code=cfg.trust_remote_code)


class GkdFlow(TrainingFlow[GkdStep]):
    """gkd's part of the training flow (swiftbox/training/flow.py): the teacher, KL before/after, GKDTrainer."""

    kind = "gkd"
    labels_only = False

    def read(self) -> None:
        from swiftbox import data

        cfg = self.cfg
        self.rows = data.load_sft(cfg.dataset, cfg.seed, cfg.max_row_chars)
        self.eval_rows = data.load_sft(cfg.eval_dataset, cfg.seed, cfg.max_row_chars) if cfg.eval_dataset else None

    def prepare(self, tm: TrainModel) -> None:
        from swiftbox import data
        from swiftbox.training import distill
        from swiftbox.training.lora_init import maybe_eva
        from swiftbox.training.outputs import log

        cfg = self.cfg
        tokenized, counts = data.tokenize_sft(self.rows, tm.tokenizer, cfg.max_length)
        train, no_prompt = distill.with_prompts(tokenized)
        if not train:
            raise UserError(f"dataset {cfg.dataset}: no row has a prompt and a reply that fit in max_length "
                            f"{cfg.max_length}")
        if counts.truncated or counts.dropped or no_prompt:
            log(f"gkd: {counts.truncated} row(s) truncated from the left to max_length {cfg.max_length}, "
                f"{counts.dropped + no_prompt} dropped (reply alone longer than max_length, or no prompt left)")
        self.train, self.counts, self.no_prompt = train, counts, no_prompt
        self.evals = distill.with_prompts(data.tokenize_sft(self.eval_rows, tm.tokenizer, cfg.max_length)[0])[0] \
            if self.eval_rows else None
        maybe_eva(cfg, tm, lambda: train, log)
        self.teacher = distill.load_teacher(cfg.teacher, cfg, self.ctx.platform, self.dtype, tm.tokenizer)
        distill.same_width(tm.model, self.teacher, cfg.teacher)
        self.pad = tm.tokenizer.pad_token_id if tm.tokenizer.pad_token_id is not None else tm.tokenizer.eos_token_id
        self.probe = (self.evals or train)[:cfg.probe_rows]
        self.before = distill.kl_to_teacher(tm.model, self.teacher, self.probe, self.pad)

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        from datasets import Dataset

        from swiftbox.compat import trl_experimental
        from swiftbox.training import distill

        cfg = self.cfg
        GKDConfig, GKDTrainer = trl_experimental("gkd")
        args = GKDConfig(**self.args(checkpoints), lmbda=cfg.lmbda, beta=cfg.beta,
                         temperature=cfg.temperature, seq_kd=cfg.seq_kd, max_new_tokens=cfg.max_new_tokens,
                         disable_dropout=True, max_length=cfg.max_length, packing=False,
                         dataset_kwargs={"skip_prepare_dataset": True}, eval_strategy="epoch" if self.evals else "no")
        return GKDTrainer(model=tm.model, teacher_model=self.teacher, args=args,
                          data_collator=distill.Collator(self.pad), train_dataset=Dataset.from_list(self.train),
                          eval_dataset=Dataset.from_list(self.evals) if self.evals else None,
                          processing_class=tm.tokenizer, callbacks=callbacks)

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        from swiftbox.training import curves, distill
        from swiftbox.training.outputs import log

        probe = self.probe
        after = distill.kl_to_teacher(tm.model, self.teacher, probe, self.pad)
        metrics: dict[str, Any] = curves.first_last(run.history, "loss", "loss")
        if probe:
            metrics.update(teacher_kl_before=round(self.before, 6), teacher_kl_after=round(after, 6))
            log(f"gkd: KL(teacher || student) on the replies of {len(probe)} row(s): {self.before:.4f} -> {after:.4f}")
        if self.evals:
            metrics["eval_loss"] = round(float(run.trainer.evaluate()["eval_loss"]), 6)
        metrics.update(samples=len(self.train), dropped_rows=self.counts.dropped + self.no_prompt,
                       truncated_rows=self.counts.truncated)
        return metrics

    def curve(self) -> Curve:
        cfg = self.cfg
        return Curve(("loss", "eval_loss"), f"gkd {cfg.method} (lmbda {cfg.lmbda}, beta {cfg.beta})")

    def info(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        cfg = self.cfg
        return {"teacher": cfg.teacher, "distillation": {"lmbda": cfg.lmbda, "beta": cfg.beta, "seq_kd": cfg.seq_kd,
                                                          "temperature": cfg.temperature,
                                                          "max_new_tokens": cfg.max_new_tokens}}


def run(cfg: GkdStep, ctx: StepContext) -> StepResult:
    return GkdFlow(cfg, ctx).run()


PIPELINE = declare("gkd", GkdStep, produces_model=True, check=check, run=run, dtypes=dtype_plan, distributed=True)
