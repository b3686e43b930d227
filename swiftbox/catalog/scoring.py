"""What a loaded model answers and how likely text is under it: greedy answers to chat prompts (batched, left
padded), the most likely of a few candidate replies, and perplexity. Used by the eval step, quantize's quality
gate, verify's parity chain and the toy model's own check.
"""
from __future__ import annotations

import math

from swiftbox.errors import UserError

PPL_WINDOW = 1024


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
