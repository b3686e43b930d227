"""A GGUF file running in llama.cpp itself, through the llama-cpp-python bindings: the figures the export's
quality report and verify's parity link need, measured where the file will be deployed - not by reading the
weights back into torch.

Every figure is taken on token ids given by the caller (the source model's tokenizer), so torch and llama.cpp
see the same input: logits at every position (`Llama(logits_all=True).eval`), perplexity on held-out rows, and
greedy continuations by argmax. `tokenize` is llama.cpp's own tokenizer, to prove it agrees with transformers'.
"""
from __future__ import annotations

import atexit
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np


def _quiet_exit() -> None:
    """llama_cpp._utils opens os.devnull twice at import and never closes it: with warnings on (swiftbox.logs) that
    is a ResourceWarning on the terminal at exit. Ignored from the exit handlers on, whatever filters ran before."""
    import warnings

    warnings.filterwarnings("ignore", message="unclosed file <_io.TextIOWrapper name='/dev/null'",
                            category=ResourceWarning)


atexit.register(_quiet_exit)


def threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


class GGUFModel:
    """One GGUF (optionally with a GGUF LoRA applied) loaded in llama.cpp on the CPU."""

    def __init__(self, path: Path, n_ctx: int = 1024, lora: Path | None = None) -> None:
        from llama_cpp import Llama

        self.path = Path(path)
        self.llm: Any = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=min(n_ctx, 512), logits_all=True,
                              n_threads=threads(), n_threads_batch=threads(), n_gpu_layers=0, verbose=False,
                              lora_path=str(lora) if lora else None, seed=0)
        self.n_ctx = n_ctx

    def close(self) -> None:
        self.llm.close()

    def __enter__(self) -> GGUFModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_vocab(self) -> int:
        return int(self.llm.n_vocab())

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's tokenization of `text` (special tokens parsed, no BOS added)."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def logits(self, ids: list[int]) -> np.ndarray:
        """[len(ids), vocab] float32 logits at every position."""
        ids = ids[: self.n_ctx]
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)

    def nll(self, ids: list[int]) -> tuple[float, int]:
        """(summed negative log-likelihood of ids[1:], count)."""
        if len(ids) < 2:
            return 0.0, 0
        logits = self.logits(ids).astype(np.float64)
        ids = ids[: len(logits)]
        shifted = logits[:-1]
        peak = shifted.max(axis=1, keepdims=True)
        logsum = np.log(np.exp(shifted - peak).sum(axis=1)) + peak[:, 0]
        target = shifted[np.arange(len(ids) - 1), ids[1:]]
        return float((logsum - target).sum()), len(ids) - 1

    def perplexity(self, rows: list[dict]) -> float:
        """exp(mean token NLL) over rows of {"input_ids": [...]}, as swiftbox's torch perplexity counts it."""
        total, count = 0.0, 0
        for row in rows:
            value, n = self.nll(list(row["input_ids"]))
            total, count = total + value, count + n
        mean = total / max(count, 1)
        return math.exp(mean) if math.isfinite(mean) and mean < 700 else float("nan")

    def greedy(self, ids: list[int], max_new_tokens: int, stop: set[int]) -> list[int]:
        """Greedy continuation token ids (argmax at each step; ends at a token in `stop`, not included)."""
        self.llm.reset()
        self.llm.eval(ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            token = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            if token in stop or self.llm.n_tokens >= self.n_ctx:
                break
            out.append(token)
            self.llm.eval([token])
        return out

    def metadata(self) -> dict[str, str]:
        return dict(self.llm.metadata)


def load(path: Path, n_ctx: int = 1024, lora: Path | None = None) -> GGUFModel:
    """Load `path` in llama.cpp; a file llama.cpp refuses raises ValueError naming it."""
    try:
        return GGUFModel(path, n_ctx, lora)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ValueError(f"llama.cpp cannot load {Path(path).name}"
                         f"{' with ' + Path(lora).name if lora else ''} ({' '.join(str(exc).split())[:160]})") from None


def stop_ids(tokenizer, model_dir: Path) -> set[int]:
    """Token ids a greedy continuation ends at: generation_config's eos ids and the tokenizer's eos."""
    ids: set[int] = set()
    try:
        eos = json.loads((Path(model_dir) / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError):
        eos = None
    for value in (eos, getattr(tokenizer, "eos_token_id", None)):
        ids |= {v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)}
    return ids
