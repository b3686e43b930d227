"""Per-request sampling for the built-in engine: output grammar, logit bias, penalties, temperature, top-k, top-p,
seeded draws, logprobs.

One row of logits per sequence; each sequence carries its own settings and, when it asked for a
seed, its own torch.Generator - so a seeded request gives the same answer whatever else is batched.
A row whose scores are not finite raises `NonFiniteLogits`; the engine fails that request alone.

Logprobs follow OpenAI's and vLLM's meaning: the log-softmax of the model's raw next-token scores, before
penalties, temperature, top-k and top-p (the distribution the model gives, not the one the draw used), for
the chosen token and the `top_logprobs` most likely ones.

The scores are shaped in vLLM's order: the output grammar's mask (constrained.py: forbidden tokens at -inf), then
`logit_bias` (OpenAI's: added to the raw score; -100 bans a token, +100 all but forces it), then the penalties.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: Optional[int] = None      # None: none; k >= 0: the chosen token's logprob and the top k
    logit_bias: Optional[dict[int, float]] = None   # token id -> added to its score
    grammar: Any = None                 # constrained.Grammar: each sequence samples under its own matcher

    @property
    def greedy(self) -> bool:
        return self.temperature <= 1e-5 or self.top_k == 1

    @property
    def penalised(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1.0

    @property
    def shaped(self) -> bool:
        """Whether the raw scores are changed before the pick (a plain greedy row needs only their argmax)."""
        return self.penalised or bool(self.logit_bias) or self.grammar is not None


class NonFiniteLogits(ValueError):
    """The scores of one sequence became NaN/inf (a model fault or extreme settings): that request fails."""


def make_generator(seed: Optional[int]):
    if seed is None:
        return None
    import torch

    gen = torch.Generator()
    gen.manual_seed(seed % (2**63))
    return gen


def sample_row(logits, params: SamplingParams, prompt_ids: list[int], out_ids: list[int], generator,
               matcher=None) -> int:
    """Pick the next token from one row of logits (1-D float tensor on any device), under the sequence's grammar
    matcher when it has one. The row itself is never changed (the engine reads logprobs from it afterwards)."""
    import torch

    logits = logits.float()
    if matcher is not None:
        logits = matcher.mask(logits)
    if params.logit_bias:
        logits = add_bias(logits, params.logit_bias)
    if params.penalised:
        logits = logits.clone()
        if params.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(prompt_ids) | set(out_ids)), dtype=torch.long, device=logits.device)
            if seen.numel():
                vals = logits[seen]
                logits[seen] = torch.where(vals > 0, vals / params.repetition_penalty, vals * params.repetition_penalty)
        if out_ids and (params.presence_penalty or params.frequency_penalty):
            ids, counts = torch.tensor(out_ids, dtype=torch.long).unique(return_counts=True)
            ids = ids.to(logits.device)
            logits[ids] -= params.frequency_penalty * counts.to(logits.device, logits.dtype) + params.presence_penalty
    if params.greedy:
        _check_finite(logits)
        return int(torch.argmax(logits))
    logits = logits / params.temperature
    _check_finite(logits)
    if params.top_k > 0 and params.top_k < logits.numel():
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        drop = cum - sorted_p > params.top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_p.cpu(), 1, generator=generator)
        return int(order[int(choice)])
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def add_bias(logits, bias: dict[int, float]):
    """`logits` (1-D) plus OpenAI's `logit_bias` (ids checked against the vocabulary by the backend); a new tensor."""
    import torch

    ids = torch.tensor(list(bias), dtype=torch.long, device=logits.device)
    values = torch.tensor(list(bias.values()), dtype=logits.dtype, device=logits.device)
    return logits.index_add(0, ids, values)


def _check_finite(logits) -> None:
    """-inf is a masked token and fine; NaN or +inf would make argmax/multinomial meaningless or raise."""
    import torch

    if bool(torch.isnan(logits).any()) or bool(torch.isposinf(logits).any()):
        raise NonFiniteLogits("the next-token scores are not finite (NaN/inf); check the sampling settings")


def token_logprobs(logits, rows: list[int], tokens: list[int], tops: list[int]) -> list[tuple]:
    """(chosen token's logprob, [(token, logprob), ...top k]) for each of `rows` of a [batch, vocab] score
    tensor: one log-softmax over those rows and one device->host copy."""
    import torch

    index = torch.tensor(rows, dtype=torch.long, device=logits.device)
    logp = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
    chosen = logp.gather(1, torch.tensor(tokens, dtype=torch.long, device=logits.device).unsqueeze(1))
    chosen_list = chosen.squeeze(1).tolist()
    k = max(tops)
    top_vals: list = [[] for _ in rows]
    top_ids: list = [[] for _ in rows]
    if k > 0:
        vals, ids = torch.topk(logp, k, dim=-1)
        top_vals, top_ids = vals.tolist(), ids.tolist()
    return [(chosen_list[i], list(zip(top_ids[i][:tops[i]], top_vals[i][:tops[i]]))) for i in range(len(rows))]
