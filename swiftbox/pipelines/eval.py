"""Evaluation: accuracy of generated answers against references, and perplexity on text.

With `benchmark:` it runs standard benchmarks instead (swiftbox.benchmarks: lm-evaluation-harness on local files),
on the input model, each `compare:` model and/or a server (`url:`), and prints one comparison table.

Works on anything loading.py can load: a base model, base + adapter (an adapter artifact dir), a merged
model or a quantized export. Accuracy: greedy generation in left-padded batches; the answer is compared
with the reference (`exact` after trimming case/whitespace/end punctuation, or `contains`).
When the references take only a few distinct values (e.g. yes/no), `choice_accuracy` also scores each
candidate by its log-likelihood: that is the number that sits near chance for an untrained model, whose
generated text is usually no answer at all (accuracy 0, below chance). Perplexity: exp of the mean token
negative log-likelihood over a .txt / jsonl file, in windows of at most `max_length` tokens. The measuring
itself (generate, choose, perplexity) lives in swiftbox/catalog/scoring.py, where verify, quantize's quality
gate and the toy model's check use it too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from swiftbox.catalog.scoring import choose, generate, perplexity
from swiftbox.contract import Plan, StepContext, StepResult, declare
from swiftbox.data.answers import matches, normalise  # noqa: F401  (eval.matches stays importable)
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.modeling.loading import ModelSpec
from swiftbox.steps import EvalStep

MAX_CHOICES = 8          # distinct references at or below this count get a choice_accuracy
__all__ = ["PIPELINE", "choose", "generate", "matches", "perplexity"]


@dataclass(frozen=True, kw_only=True)
class EvalPlan(Plan):
    """Your own file's evaluation as check read it: the model resolved, the questions and the texts loaded."""

    spec: ModelSpec
    pairs: list = field(default_factory=list)     # (prompt messages, reference)
    texts: list = field(default_factory=list)     # perplexity texts


def check(cfg: EvalStep, platform: Platform, input: str) -> Optional[EvalPlan]:
    """Every refusal before any output exists: benchmarks' own (eval_benchmarks.check_benchmarks); for your own
    files, the mode, the model (resolved here) and the data (read here, once: run scores what this returns)."""
    if cfg.benchmark:
        from swiftbox.pipelines.eval_benchmarks import check_benchmarks

        check_benchmarks(cfg, input)
        return None
    if cfg.compare or cfg.url:
        raise UserError("eval: compare: and url: go with benchmark: (standard benchmarks); for your own file "
                        "evaluate each model in its own step")
    if not cfg.dataset and not cfg.perplexity:
        raise UserError("eval: nothing to measure; give dataset: (questions with reference answers) and/or "
                        "perplexity: (text)")
    if not input:
        raise UserError("eval: no model to evaluate: give a model (or, with benchmark:, a url:)")
    from swiftbox import data
    from swiftbox.modeling.loading import resolve_spec

    pairs = data.load_eval(cfg.dataset, cfg.limit) if cfg.dataset else []
    texts = data.load_texts(cfg.perplexity) if cfg.perplexity else []
    return EvalPlan(spec=resolve_spec(input), pairs=pairs, texts=texts[: cfg.limit] if cfg.limit else texts)


def run(cfg: EvalStep, ctx: StepContext) -> StepResult:
    if cfg.benchmark:
        from swiftbox.pipelines.eval_benchmarks import run_benchmarks

        return run_benchmarks(cfg, ctx)
    from swiftbox.modeling.loading import load_model, load_tokenizer

    plan = ctx.plan_as(EvalPlan)
    spec, pairs, texts = plan.spec, plan.pairs, plan.texts
    tokenizer = load_tokenizer(spec, trust_remote_code=cfg.trust_remote_code)
    model = load_model(spec, ctx.platform, ctx.dtype(cfg.dtype), trust_remote_code=cfg.trust_remote_code)

    metrics: dict = {}
    info: dict = {"artifact": "report", "model": str(ctx.input)}
    if pairs:
        predictions = generate(model, tokenizer, [p for p, _ in pairs], cfg.max_new_tokens, cfg.batch_size)
        hits = [matches(pred, ref, cfg.match) for pred, (_, ref) in zip(predictions, pairs)]
        metrics.update(accuracy=round(sum(hits) / len(hits), 4), correct=sum(hits), total=len(hits))
        choices = sorted({ref.strip() for _, ref in pairs})
        if 2 <= len(choices) <= MAX_CHOICES:
            picked = choose(model, tokenizer, [p for p, _ in pairs], choices, cfg.batch_size)
            right = [c == ref.strip() for c, (_, ref) in zip(picked, pairs)]
            metrics.update(choice_accuracy=round(sum(right) / len(right), 4), chance=round(1 / len(choices), 4))
        with open(ctx.work_dir / "predictions.jsonl", "w") as fh:
            for (prompt, ref), pred, ok in zip(pairs, predictions, hits):
                fh.write(json.dumps({"prompt": prompt[-1]["content"], "reference": ref, "prediction": pred,
                                     "correct": ok}) + "\n")
        info["examples"] = [{"prompt": p[-1]["content"], "reference": r, "prediction": pred}
                            for (p, r), pred in list(zip(pairs, predictions))[:5]]
    if texts:
        metrics["perplexity"] = round(perplexity(model, tokenizer, texts), 4)
    return StepResult(metrics=metrics, info=info)


PIPELINE = declare("eval", EvalStep, produces_model=False, needs_input=False, check=check, run=run)
