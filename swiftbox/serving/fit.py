"""Engine fit, the one home of what each engine can serve: read by serve (before the model loads and when a
client loads an adapter), by verify (section "engine") and by the menu (it greys out an engine that cannot
serve the picked model).

LoRA adapters against vLLM's limits (vllm/lora/peft_helper.py refuses `modules_to_save`, DoRA and adapter
bias; ranks above its largest `max_lora_rank` 512; LoRA only on linear layers, so no embedding/lm_head
targets or resized vocabularies) - vllm-ascend reuses vLLM's LoRA code, so the same limits hold on NPU.
The built-in engine serves what PEFT can pick per row of a batch (not DoRA: merge it first). The config-side
rules are the adapter record's (swiftbox/modeling/adapter_file.py `limits`); this module adds the weight-file ones.
Quantized checkpoints against what the engine runs here: which engines serve a method's exports is its record's
(swiftbox/quant_methods.py `engines`), narrowed by the platform (its capability matrix and `vllm_quantizations`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from swiftbox import quant_methods
from swiftbox.modeling import adapter_file
from swiftbox.modeling.adapter_file import AdapterFile, AdapterFileError

ENGINES = ("builtin", "vllm")
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)    # vLLM's accepted --max-lora-rank values
BUILTIN_MAX_LORA_RANK = adapter_file.MAX_RUNTIME_RANK   # vLLM's largest max_lora_rank too
NOT_LINEAR = adapter_file.NOT_LINEAR
rewrites_base = adapter_file.rewrites_base


def _read(adapter: Path) -> AdapterFile | str:
    """The adapter's record, or why its config cannot be read."""
    try:
        return AdapterFile.read(adapter)
    except AdapterFileError as exc:
        return exc.reason


def init_problem(config: dict) -> Optional[str]:
    """Why `init_lora_weights` makes this adapter something other than a plain delta on its base (None: it does not)."""
    return adapter_file.init_problem(config.get("init_lora_weights", True))


def adapter_problems_for_vllm(adapter: Path, base_vocab: int | None) -> list[str]:
    """What stops vLLM from serving this PEFT adapter (empty = it fits): the record's vLLM limits, and no full
    embedding / lm_head weights or resized vocabulary in its weights file."""
    record = _read(adapter)
    if isinstance(record, str):
        return [record]
    return adapter_file.limits(record, "vllm") + _resized_embeddings(adapter, base_vocab)


def _resized_embeddings(adapter: Path, base_vocab: int | None) -> list[str]:
    from safetensors import safe_open

    weights = adapter / "adapter_model.safetensors"
    if not weights.is_file():
        return []
    try:
        with safe_open(str(weights), framework="pt") as handle:
            names = list(handle.keys())
            full = [k for k in names if any(n in k for n in NOT_LINEAR) and "lora_" not in k]
            rows = {handle.get_slice(k).get_shape()[0] for k in full}
    except Exception as exc:  # noqa: BLE001 - safetensors' own error types
        return [f"{weights.name} cannot be read ({' '.join(str(exc).split())[:120]})"]
    out = []
    if full:
        out.append(f"carries full embedding/lm_head weights ({full[0]}): vLLM cannot load them")
    if base_vocab and any(r != base_vocab for r in rows):
        out.append(f"resized vocabulary ({sorted(rows)} rows vs the base's {base_vocab})")
    return out


def adapter_problems_for_builtin(adapter: Path) -> list[str]:
    """What stops the built-in engine from serving this adapter attached (empty = it fits): it picks an adapter
    per row (PEFT's `adapter_names`), which PEFT refuses for DoRA."""
    record = _read(adapter)
    return [record] if isinstance(record, str) else adapter_file.limits(record, "builtin")


def adapter_rank(config: dict[str, Any]) -> int:
    """The largest LoRA rank in an adapter_config.json (`r`, and every per-module rank in `rank_pattern`)."""
    try:
        return AdapterFile.parse(config, Path(".")).max_rank
    except AdapterFileError:
        return 0


def read_adapter_rank(adapter_dir: Path | str) -> Optional[int]:
    """The largest rank of the adapter in `adapter_dir` (None: no readable adapter_config.json)."""
    record = _read(Path(adapter_dir))
    return None if isinstance(record, str) else record.max_rank


def adapter_problems(adapter: Path, engine: str, base_vocab: int | None = None) -> list[str]:
    """What stops `engine` from serving this adapter attached (empty = it fits)."""
    if engine == "builtin":
        return adapter_problems_for_builtin(adapter)
    return adapter_problems_for_vllm(adapter, base_vocab)


def quantization_fit(quant: str, engine: str, platform: Any) -> tuple[bool, str, str]:
    """(fits, label, detail) for serving a `quant`-quantized checkpoint (config.json's quant_method) on `engine`
    on this platform: vLLM by the platform's `vllm_quantizations`, the built-in engine by its capability matrix."""
    method = quant_methods.by_export(quant)
    if engine == "vllm":
        allowed = platform.vllm_quantizations     # None: whatever the records say vLLM serves
        ok = method is not None and "vllm" in method.engines and (allowed is None or quant in allowed)
        return ok, f"{quant} on {platform.vllm_package} ({platform.name})", (
            f"{platform.vllm_package} serves {quant} checkpoints" if ok else
            f"{platform.vllm_package} does not serve {quant} checkpoints here; {platform.vllm_quantization_instead}")
    if method is None or "builtin" not in method.engines:
        served = quant_methods.and_list([m.quant_method for m in quant_methods.served_by("builtin") if m.quant_method])
        return False, f"{quant} on builtin", (f"unknown quant_method {quant!r}: the built-in engine loads {served} "
                                               "checkpoints")
    refusal = platform.why_not(method.feature)
    if refusal is not None and method.builtin_dequantizes:
        return True, f"{quant} on builtin ({platform.name})", (
            f"transformers dequantizes {method.title} to bf16 here ({refusal.why}): it runs, without "
            f"{method.title}'s savings")
    return refusal is None, f"{quant} on builtin ({platform.name})", (
        "loads here" if refusal is None else f"{refusal.why}; use {refusal.instead}")


def artifact_problems(ref: str, engine: str, platform: Any) -> list[str]:
    """Why `engine` cannot serve the model or adapter `ref` here, from its files alone (empty: it can, as far as
    the files tell). What the menu greys an engine out with; serve and verify run the full gate."""
    from swiftbox.errors import UserError
    from swiftbox.modeling.loading import resolve_spec

    if not Path(ref).is_dir():
        return []          # a hub id or preset: nothing to read before it is downloaded
    try:
        spec = resolve_spec(ref)
    except UserError:
        return []          # the step itself will say why
    problems = []
    if engine == "vllm" and len(spec.adapters) > 1:
        problems.append("a chain of adapters (vLLM serves one adapter on its base; merge the earlier ones)")
    if spec.adapters:     # the built-in engine merges all but the last one in at load time
        last = spec.adapters[-1]
        problems += adapter_problems(last, engine, vocab_size(spec.base))
    if spec.quantized:
        ok, _label, detail = quantization_fit(spec.quantized, engine, platform)
        if not ok:
            problems.append(detail)
    return problems


def vocab_size(folder: Path) -> int | None:
    """The vocabulary size in a model folder's config.json (None: unreadable)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
