"""What every preference step shares (dpo, kto, orpo, simpo, rm): their part of the training flow
(swiftbox/training/flow.py), top to bottom:

read the rows (pairs, or KTO's labelled single completions; data that teaches nothing refused before the model
loads) -> [the flow loads the model: adapter / 4-bit / full; the rm step a one-output classification head] ->
swiftbox splits each row itself (prompt = the generation prompt, replies = exactly what the template renders for
them; long prompts cut from the left) -> the step's TRL trainer on those strings -> [train: resume, finite-loss
guard] -> first/last reward margin and accuracy, held-out figures with `eval_dataset` -> [the artifact, loss curve
PNG, TensorBoard, manifest info].

A step module supplies only what differs: a `Method` (names, data shape, log keys) and `build(cfg, tm, train,
evals, args, callbacks) -> (trainer, info)`, where `args` are the TrainingArguments every step shares.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from swiftbox.errors import UserError
from swiftbox.steps import TrainBase
from swiftbox.training.flow import Curve, Trained, TrainingFlow

if TYPE_CHECKING:
    from swiftbox.contract import StepContext, StepResult
    from swiftbox.training.model import TrainModel


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


# build(cfg, tm, train, evals, args, callbacks) -> (trainer, manifest info)
Build = Callable[[Any, "TrainModel", Any, Any, dict, list], "tuple[Any, dict]"]


class PreferenceFlow(TrainingFlow[TrainBase]):
    """The preference steps' part of the training flow; `method` and `build` are the step's own."""

    def __init__(self, cfg: TrainBase, ctx: StepContext, method: Method, build: Build) -> None:
        super().__init__(cfg, ctx)
        self.method, self.build = method, build
        self.kind, self.reward_head = method.kind, method.reward_head
        self.unpadded = not method.reward_head      # a causal LM's forwards (not the reward model's head)
        self.built: dict = {}

    def read(self) -> None:
        from swiftbox import data
        from swiftbox.data.degenerate import check_preference_rows
        from swiftbox.training.outputs import log

        cfg, method = self.cfg, self.method
        load = data.load_kto if method.unpaired else data.load_dpo
        switches = getattr(cfg, "chat_template_kwargs", None)     # the step's template switches: every row's defaults
        rows = data.with_switches(load(cfg.dataset, cfg.seed, cfg.max_row_chars), switches)
        if method.unpaired and len({r["label"] for r in rows}) < 2:
            raise UserError(f"dataset {cfg.dataset}: KTO needs both good (label true) and bad (label false) rows; "
                            f"every row is {rows[0]['label'] if rows else 'missing'}")
        check_preference_rows(method.kind, cfg.dataset, rows, method.unpaired, log)   # before the model loads
        self.rows = rows
        self.eval_rows = data.with_switches(load(cfg.eval_dataset, cfg.seed, cfg.max_row_chars),
                                            switches) if cfg.eval_dataset else None

    def prepare(self, tm: TrainModel) -> None:
        from swiftbox import data
        from swiftbox.training.outputs import log

        cfg, method = self.cfg, self.method
        split = data.kto_strings if method.unpaired else data.dpo_strings
        examples, counts = split(self.rows, tm.tokenizer, cfg.max_length)
        unit = method.unit
        if counts.truncated or counts.dropped:
            log(f"{method.kind}: {counts.truncated} {unit} truncated from the left to max_length {cfg.max_length} "
                f"(system prompt and replies kept), {counts.dropped} dropped (empty reply, or a reply alone longer "
                "than max_length)")
        if not examples:
            raise UserError(f"dataset {cfg.dataset}: no row has a non-empty reply that fits in max_length "
                            f"{cfg.max_length}")
        self.examples, self.counts = examples, counts
        self.evals = split(self.eval_rows, tm.tokenizer, cfg.max_length)[0] if self.eval_rows else None

    def scoring(self, model: Any) -> AbstractContextManager[Any]:
        """The flow's scoring, and the policy and reference forwards of a causal LM run without the batch's
        padding where packing is exact here (training/unpadded.py; not the reward model's classification head).
        The model was loaded for it (`load_for_training(unpadded=True)`: the per-sample attention a packing SFT
        step gets, not a dense block mask over the packed row)."""
        from swiftbox.training.arguments import model_type, unpadded_preference
        from swiftbox.training.unpadded import unpadded_backbone

        stack = ExitStack()
        stack.enter_context(super().scoring(model))
        if self.unpadded and unpadded_preference(self.ctx.platform, model_type(model)):
            stack.enter_context(unpadded_backbone(model))
        return stack

    def trainer(self, tm: TrainModel, checkpoints: Path, callbacks: list) -> Any:
        from datasets import Dataset

        trainer, self.built = self.build(self.cfg, tm, Dataset.from_list(self.examples),
                                         Dataset.from_list(self.evals) if self.evals else None,
                                         self.args(checkpoints), callbacks)
        return trainer

    def metrics(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        from swiftbox.training import curves

        method, history, trainer, unit = self.method, run.history, run.trainer, self.method.unit
        margins = curves.first_last(history, method.margin_key, "reward_margin")
        metrics: dict[str, Any] = dict(margins)
        if margins:
            metrics["reward_margin"] = margins["reward_margin_last"]
        metrics.update(curves.first_last(history, method.accuracy_key, "reward_accuracy"))
        metrics.update(curves.first_last(history, "loss", "loss"))
        if self.evals:
            metrics.update(held_out(trainer.evaluate(), method))
            sharded = getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False)
            if method.reward_head and not sharded:
                from swiftbox.training.reward_model import pairwise_accuracy

                metrics["eval_reward_accuracy"] = pairwise_accuracy(trainer.model, tm.tokenizer, self.evals)
        metrics.update({unit: len(self.examples), f"dropped_{unit}": self.counts.dropped,
                        f"truncated_{unit}": self.counts.truncated})
        return metrics

    def curve(self) -> Curve:
        method = self.method
        return Curve(("loss", method.margin_key, method.accuracy_key), f"{method.title} {self.cfg.method}")

    def info(self, tm: TrainModel, run: Trained) -> dict[str, Any]:
        info: dict[str, Any] = {"artifact": self.method.artifact} if self.method.artifact else {}
        return {**info, **self.built}


def run_preference(cfg: TrainBase, ctx: StepContext, method: Method, build: Build) -> StepResult:
    """A preference step: the training flow with the step's Method and trainer."""
    return PreferenceFlow(cfg, ctx, method, build).run()


def check_ref_adapter(kind: str, cfg: TrainBase) -> None:
    """dpo / kto `check`: `ref_adapter` needs an adapter method, and must be an adapter directory (resolved here,
    before any output exists)."""
    ref = getattr(cfg, "ref_adapter", None)
    if not ref:
        return
    if cfg.method == "full":
        raise UserError(f"{kind}.ref_adapter: a reference adapter needs an adapter method (lora, qlora, dora), not "
                        "full")
    from swiftbox.modeling.loading import resolve_spec

    if not resolve_spec(ref).adapters:
        raise UserError(f"{kind}.ref_adapter {ref}: not an adapter directory (no adapter_config.json)")


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
