"""Chunked prefill for the built-in engine: one prompt's KV cache built slice by slice.

A `PrefillJob` holds one prompt and the sequences that share it (the `n` choices of one request: the
prompt is prefilled once, then its cache is copied into n batch rows). The engine gives the waiting jobs a
token budget per loop iteration (`prefill_chunk`), so a long prompt costs the running streams at most one
slice between two of their decode steps instead of its whole prefill. Each slice is a forward over
`ids[done:done + k]` on the job's own `DynamicCache`, with position ids `done..done + k - 1`, which is the
same computation as a whole prefill split at the slice boundaries (greedy tokens identical; logits equal
to float rounding).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

DEFAULT_PREFILL_CHUNK = 256


@dataclass
class PrefillJob:
    prompt_ids: list[int]
    adapter: Optional[str]
    seqs: list                      # engine Sequences sharing this prompt (n > 1: one prefill, n rows)
    cache: Any = None               # the job's own DynamicCache while it is being built
    done: int = 0                   # prompt tokens already in the cache
    logits: Any = None              # next-token scores after the last slice
    slices: int = field(default=0)

    @property
    def remaining(self) -> int:
        return len(self.prompt_ids) - self.done

    @property
    def live(self) -> list:
        return [s for s in self.seqs if not s.done and not s.cancelled]


def prefill_slice(engine, job: PrefillJob, budget: int) -> int:
    """Feed up to `budget` more prompt tokens of `job` through the model; returns how many were fed."""
    import torch
    from transformers import DynamicCache

    k = min(budget, job.remaining)
    if k <= 0:
        return 0
    dev = engine.device
    if job.cache is None:
        job.cache = DynamicCache()
    ids = torch.tensor([job.prompt_ids[job.done:job.done + k]], dtype=torch.long, device=dev)
    positions = torch.arange(job.done, job.done + k, device=dev).unsqueeze(0)
    logits, job.cache = engine._forward(ids, None, positions, job.cache, [job.adapter])
    job.done += k
    job.slices += 1
    if job.remaining == 0:
        job.logits = logits
    return k


def replicate(cache, n: int):
    """The cache of one prompt row copied into `n` rows (n > 1 choices share one prefill)."""
    from swiftbox.compat import cache_from_layers, cache_layers

    if n == 1:
        return cache
    return cache_from_layers([(k.expand(n, -1, -1, -1).contiguous(), v.expand(n, -1, -1, -1).contiguous())
                              for k, v in cache_layers(cache)])
