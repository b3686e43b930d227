"""Pretraining of the toy model: a plain, readable next-token loop over the bundled corpus.

Run through `python -m swiftbox.catalog.toy --rebuild [--steps N] [--seed S]`; the committed weights in
swiftbox/assets/toy/ were made this way (the record is assets/toy/toy.json). Deterministic for a given
seed on a given device and software stack: the same machine gives byte-identical safetensors.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class PretrainConfig:
    steps: int = 400
    batch_size: int = 32
    seq_len: int = 256
    learning_rate: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    log_every: int = 250


def token_blocks(tokenizer, documents: list[str], seq_len: int, seed: int):
    """The documents in a seeded order, joined by <|endoftext|>, cut into blocks of seq_len + 1 tokens."""
    import random

    import torch

    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    sep = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    stream: list[int] = []
    for i in order:
        stream += tokenizer(documents[i], add_special_tokens=False)["input_ids"] + [sep]
    usable = (len(stream) - 1) // seq_len * seq_len
    starts = range(0, usable, seq_len)
    return torch.tensor([stream[s:s + seq_len + 1] for s in starts]), len(stream)


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.learning_rate * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(model, tokenizer, documents: list[str], cfg: PretrainConfig, device, log=print) -> dict:
    """Train `model` in place; returns the record (config, tokens, losses, time)."""
    import torch

    torch.manual_seed(cfg.seed)
    blocks, n_tokens = token_blocks(tokenizer, documents, cfg.seq_len, cfg.seed)
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.learning_rate, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(len(blocks), generator=gen)
    cursor, losses, t0 = 0, [], time.perf_counter()
    for step in range(cfg.steps):
        if cursor + cfg.batch_size > len(order):
            order, cursor = torch.randperm(len(blocks), generator=gen), 0
        batch = blocks[order[cursor:cursor + cfg.batch_size]].to(device)
        cursor += cfg.batch_size
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = _next_token_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            losses.append([step, round(loss.item(), 4)])
            log(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step, cfg):.2e}  {time.perf_counter() - t0:.0f}s")
    model.eval().to("cpu")
    return {"config": asdict(cfg), "corpus_tokens": n_tokens, "blocks": len(blocks),
            "epochs": round(cfg.steps * cfg.batch_size / len(blocks), 2), "losses": losses,
            "seconds": round(time.perf_counter() - t0, 1)}


def _next_token_loss(model, batch):
    import torch

    logits = model(input_ids=batch[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))


def write_record(out: Path, record: dict) -> None:
    (out / "toy.json").write_text(json.dumps(record, indent=1) + "\n")
