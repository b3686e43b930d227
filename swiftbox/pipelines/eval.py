"""Evaluation: accuracy of generated answers against references, and perplexity on text.

With `benchmark:` it runs standard benchmarks instead (swiftbox.benchmarks: lm-evaluation-harness on local files),
on the input model, each `compare:` model and/or a server (`url:`), and prints one comparison table.

Works on anything loading.py can load: a base model, base + adapter (an adapter artifact dir), a merged
model or a quantized export. Accuracy: greedy generation in left-padded batches; the answer is compared
with the reference (`exact` after trimming case/whitespace/end punctuation, or `contains`).
When the references take only a few distinct values (e.g. yes/no), `choice_accuracy` also scores each
candidate by its log-likelihood: that is the number that sits near chance for an untrained model, whose
generated text is usually no answer at all (accuracy 0, below chance). Perplexity: exp of the mean token
negative log-likelihood over a .txt / jsonl file, in windows of at most `max_length` tokens.
"""
from __future__ import annotations

import json
import math

from swiftbox.data.answers import matches, normalise  # noqa: F401  (eval.matches stays importable)
from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import EvalStep

MAX_CHOICES = 8          # distinct references at or below this count get a choice_accuracy
PPL_WINDOW = 1024


def check(cfg: EvalStep, platform: Platform) -> None:
    if cfg.benchmark:
        from swiftbox.pipelines.eval_benchmarks import check_benchmarks

        check_benchmarks(cfg)
        return
    if cfg.compare or cfg.url:
        raise UserError("eval: compare: and url: go with benchmark: (standard benchmarks); for your own file "
                        "evaluate each model in its own step")
    if not cfg.dataset and not cfg.perplexity:
        raise UserError("eval: nothing to measure; give dataset: (questions with reference answers) and/or "
                        "perplexity: (text)")


def run(cfg: EvalStep, ctx: StepContext) -> StepResult:
    if cfg.benchmark:
        from swiftbox.pipelines.eval_benchmarks import run_benchmarks

        return run_benchmarks(cfg, ctx)
    if not ctx.input:
        raise UserError("eval: no model to evaluate: give a model (or, with benchmark:, a url:)")
    from swiftbox import data
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec

    pairs = data.load_eval(cfg.dataset, cfg.limit) if cfg.dataset else []
    texts = data.load_texts(cfg.perplexity) if cfg.perplexity else []
    if cfg.limit:
        texts = texts[: cfg.limit]
    spec = resolve_spec(ctx.input)
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


def _device(model):
    return next(model.parameters()).device


def generate(model, tokenizer, prompts: list[list[dict]], max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy answers to chat prompts, batched with left padding."""
    import torch

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    out: list[str] = []
    try:
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = {k: v.to(_device(model)) for k, v in batch.items()}
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
            new = ids[:, batch["input_ids"].shape[1]:]
            out += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = side
    return out


def choose(model, tokenizer, prompts: list[list[dict]], choices: list[str], batch_size: int) -> list[str]:
    """For each prompt, the choice whose whole reply (as the template renders it, end-of-turn marker included;
    located like SFT labels, swiftbox.data.render) has the highest log-likelihood."""
    from swiftbox import data

    rows = []   # (prompt index, choice index, ids, labels)
    for i, prompt in enumerate(prompts):
        for j, choice in enumerate(choices):
            enc = data.encode(tokenizer, prompt + [{"role": "assistant", "content": choice}], only_last=True)
            rows.append((i, j, enc.input_ids, enc.labels))
    scores = [[-math.inf] * len(choices) for _ in prompts]
    for k in range(0, len(rows), batch_size):
        chunk = rows[k:k + batch_size]
        for (i, j, _, _), score in zip(chunk, _answer_logprobs(model, tokenizer, chunk)):
            scores[i][j] = score
    return [choices[max(range(len(choices)), key=lambda j: s[j])] for s in scores]


def _answer_logprobs(model, tokenizer, chunk) -> list[float]:
    """Sum of log-probabilities of the labelled (reply) tokens of each row."""
    import torch

    width = max(len(r[2]) for r in chunk)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([r[2] + [pad] * (width - len(r[2])) for r in chunk], device=_device(model))
    mask = torch.tensor([[1] * len(r[2]) + [0] * (width - len(r[2])) for r in chunk], device=_device(model))
    labels = torch.tensor([r[3] + [-100] * (width - len(r[3])) for r in chunk], device=_device(model))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    target = labels[:, 1:]
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return [float(v) for v in (logp * (target != -100)).sum(dim=1)]


def perplexity(model, tokenizer, texts: list[str]) -> float:
    import torch

    window = min(PPL_WINDOW, getattr(model.config, "max_position_embeddings", PPL_WINDOW) or PPL_WINDOW)
    nll, count = 0.0, 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), window):
            piece = ids[start:start + window]
            if len(piece) < 2:
                continue
            x = torch.tensor([piece], device=_device(model))
            with torch.no_grad():
                loss = model(input_ids=x, labels=x).loss.float().item()
            nll += loss * (len(piece) - 1)
            count += len(piece) - 1
    if count == 0:
        raise UserError("perplexity: the text holds fewer than 2 tokens")
    return math.exp(nll / count)


PIPELINE = declare("eval", EvalStep, produces_model=False, needs_input=False, check=check, run=run)
