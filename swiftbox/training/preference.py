"""The flow every preference step shares (dpo, kto, orpo, simpo, rm), top to bottom:

relaunch under torchrun when asked -> read the rows (pairs, or KTO's labelled single completions) -> load the
model (training.model: adapter / 4-bit / full; the rm step a one-output classification head) -> swiftbox splits
each row itself (prompt = the generation prompt, replies = exactly what the template renders for them; long
prompts cut from the left) -> the step's TRL trainer on those strings -> train (resume, finite-loss guard) ->
first/last reward margin and accuracy, held-out figures with `eval_dataset`, loss curve PNG, TensorBoard, the
artifact and its manifest info.

A step module supplies only what differs: a `Method` (names, data shape, log keys) and `build(cfg, tm, train,
evals, args, callbacks) -> (trainer, info)`, where `args` are the TrainingArguments every step shares.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from swiftbox.errors import UserError

if TYPE_CHECKING:
    from swiftbox.pipelines.base import StepContext, StepResult


@dataclass(frozen=True)
class Method:
    kind: str                                  # the step kind: dpo, kto, orpo, simpo, rm
    title: str                                 # loss-curve title, e.g. "dpo (beta 0.1)"
    unpaired: bool = False                     # KTO: {prompt, completion, label} rows instead of pairs
    reward_head: bool = False                  # rm: a sequence-classification model with one output
    margin_key: str = "rewards/margins"        # the trainer's log keys of the reward margin and accuracy
    accuracy_key: str = "rewards/accuracies"
    artifact: Optional[str] = None             # manifest artifact kind; default "adapter" / "model" by method

    @property
    def unit(self) -> str:
        return "rows" if self.unpaired else "pairs"


Build = Callable[[Any, Any, Any, Any, dict, list], "tuple[Any, dict]"]


def run_preference(cfg: Any, ctx: StepContext, method: Method, build: Build) -> StepResult:
    from swiftbox.training.distributed.launch import is_main_process, maybe_relaunch

    relaunched = maybe_relaunch(cfg, ctx)
    if relaunched is not None:
        return relaunched
    dtype = ctx.dtype(cfg.dtype)

    from swiftbox import data

    load, split = (data.load_kto, data.kto_strings) if method.unpaired else (data.load_dpo, data.dpo_strings)
    rows = load(cfg.dataset, cfg.seed, cfg.max_row_chars)
    if method.unpaired and len({r["label"] for r in rows}) < 2:
        raise UserError(f"dataset {cfg.dataset}: KTO needs both good (label true) and bad (label false) rows; "
                        f"every row is {rows[0]['label'] if rows else 'missing'}")
    from swiftbox.data.degenerate import check_preference_rows
    from swiftbox.training.outputs import log

    check_preference_rows(method.kind, cfg.dataset, rows, method.unpaired, log)   # before the model loads
    eval_rows = load(cfg.eval_dataset, cfg.seed, cfg.max_row_chars) if cfg.eval_dataset else None

    from datasets import Dataset

    from swiftbox.diagnose.profile_window import profile_callbacks
    from swiftbox.training import callbacks, checkpoints, curves
    from swiftbox.training.arguments import common_args
    from swiftbox.training.model import load_for_training
    from swiftbox.training.outputs import run_figures, save_artifact, step_result

    callbacks.silence_libraries()
    tm = load_for_training(ctx.input, cfg, ctx.platform, dtype, reward_head=method.reward_head)
    data.use_chat_template(tm.tokenizer, cfg.chat_template)
    examples, counts = split(rows, tm.tokenizer, cfg.max_length)
    unit = method.unit
    if counts.truncated or counts.dropped:
        log(f"{method.kind}: {counts.truncated} {unit} truncated from the left to max_length {cfg.max_length} "
            f"(system prompt and replies kept), {counts.dropped} dropped (empty reply, or a reply alone longer than "
            "max_length)")
    if not examples:
        raise UserError(f"dataset {cfg.dataset}: no row has a non-empty reply that fits in max_length {cfg.max_length}")
    evals = split(eval_rows, tm.tokenizer, cfg.max_length)[0] if eval_rows else None

    ckpt_dir = ctx.work_dir / "checkpoints"
    extra = profile_callbacks(cfg, ctx) + callbacks.callbacks(f"{method.kind} {cfg.method}", ctx.work_dir,
                                                              is_main_process())
    trainer, info = build(cfg, tm, Dataset.from_list(examples), Dataset.from_list(evals) if evals else None,
                          common_args(cfg, ctx, dtype, ckpt_dir), extra)
    callbacks.quiet(trainer)
    resume = checkpoints.resume_point(cfg, ckpt_dir, log)
    ctx.platform.reset_peak_memory()
    started = time.time()
    from swiftbox.compat import trl_scores_label_positions_only

    with trl_scores_label_positions_only():   # the policy and reference LM heads score the replies' tokens only
        output = trainer.train(resume_from_checkpoint=resume)
    seconds = time.time() - started
    history = trainer.state.log_history

    callbacks.check_finite_loss(method.kind, output.training_loss, trainer.state.global_step)
    margins = curves.first_last(history, method.margin_key, "reward_margin")
    metrics = {"train_loss": round(float(output.training_loss), 6), **margins}
    if margins:
        metrics["reward_margin"] = margins["reward_margin_last"]
    metrics.update(curves.first_last(history, method.accuracy_key, "reward_accuracy"))
    metrics.update(curves.first_last(history, "loss", "loss"))
    if evals:
        metrics.update(held_out(trainer.evaluate(), method))
        sharded = getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False)
        if method.reward_head and not sharded:
            from swiftbox.training.reward_model import pairwise_accuracy

            metrics["eval_reward_accuracy"] = pairwise_accuracy(trainer.model, tm.tokenizer, evals)
    metrics.update({unit: len(examples), f"dropped_{unit}": counts.dropped, f"truncated_{unit}": counts.truncated})
    metrics.update(run_figures(trainer, tm, ctx, seconds, resume))
    save_artifact(trainer, tm, ctx, selected=None if cfg.method == "full" else ["default"])  # every rank
    if is_main_process():
        keys = ("loss", method.margin_key, method.accuracy_key)
        if curves.plot(history, ctx.work_dir / "loss.png", keys, f"{method.title} {cfg.method}"):
            metrics["loss_curve"] = "loss.png"
    result = step_result(metrics, "model" if cfg.method == "full" else "adapter", tm, cfg, history)
    if method.artifact:
        result.info["artifact"] = method.artifact
    result.info.update(info)
    return result


def exact_ids(dataset: Any, tokenizer: Any, sides: tuple[str, ...]) -> Any:
    """The split strings plus their token columns (data.preference_ids), for trainers run under
    compat.trl_pretokenized; None stays None."""
    if dataset is None:
        return None
    from swiftbox import data

    return dataset.map(lambda row: data.preference_ids(tokenizer, row, sides))


def held_out(figures: dict, method: Method) -> dict:
    """The trainer's eval figures under the names the training figures have (eval_reward_margin, ...)."""
    names = {method.margin_key: "eval_reward_margin", method.accuracy_key: "eval_reward_accuracy", "loss": "eval_loss"}
    out = {}
    for key, name in names.items():
        value = figures.get(f"eval_{key}")
        if isinstance(value, (int, float)):
            out[name] = round(float(value), 6)
    return out


def reference(kind: str, trainer: Any, cfg: Any, continued: Optional[str]) -> str:
    """DPO / KTO: make the model's "ref" adapter the reference policy (`cfg.ref_adapter` when given); returns what
    the reference is, in words. TRL copies a pretrained "default" adapter into "ref" (so after SFT the reference is
    the SFT policy); a fresh adapter has none, and the reference is the base model with adapters disabled."""
    if cfg.method == "full":
        return "frozen copy of the starting model"
    model = trainer.model
    if cfg.ref_adapter:
        from swiftbox.modeling.loading import resolve_spec

        spec = resolve_spec(cfg.ref_adapter)
        if not spec.adapters:
            raise UserError(f"{kind}.ref_adapter {cfg.ref_adapter}: not an adapter directory (no adapter_config.json)")
        if "ref" in model.peft_config:
            model.delete_adapter("ref")
        model.load_adapter(str(spec.adapters[-1]), adapter_name="ref", is_trainable=False)
        model.set_adapter("default")
        return f"adapter {cfg.ref_adapter}"
    if "ref" in model.peft_config:
        return f"frozen copy of the adapter {continued}" if continued else "the base model (fresh adapter)"
    return "the base model (adapters disabled)"
