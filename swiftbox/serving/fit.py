"""Engine fit, the one home of what each engine can serve: read by serve (before the model loads and when a
client loads an adapter), by verify (section "engine") and by the menu (it greys out an engine that cannot
serve the picked model).

LoRA adapters against vLLM's limits (vllm/lora/peft_helper.py refuses `modules_to_save`, DoRA and adapter
bias; ranks above its largest `max_lora_rank` 512; LoRA only on linear layers, so no embedding/lm_head
targets or resized vocabularies) - vllm-ascend reuses vLLM's LoRA code, so the same limits hold on NPU.
The built-in engine serves what PEFT can pick per row of a batch (not DoRA: merge it first).
Quantized checkpoints against what the engine runs here: which engines serve a method's exports is its record's
(swiftbox/quant_methods.py `engines`), narrowed by the platform (its capability matrix and `vllm_quantizations`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from swiftbox import quant_methods

ENGINES = ("builtin", "vllm")
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)    # vLLM's accepted --max-lora-rank values
BUILTIN_MAX_LORA_RANK = 512     # the built-in engine's cap on runtime adapters (vLLM's largest max_lora_rank)
# PEFT init_lora_weights values whose initialisation subtracts the adapter's start from the base weights
# (peft/tuners/lora/layer.py: pissa_init, olora_init, corda_init, loftq_init, lora_ga_init): the trained adapter is
# a delta on that rewritten base until save_pretrained(path_initial_model_for_weight_conversion=...) converts it
BASE_REWRITING_PREFIXES = ("pissa", "olora", "corda", "loftq", "lora_ga")
# the other inits leave the base alone: their trained adapter is a plain delta on the untouched base
PLAIN_INITS = ("gaussian", "eva", "orthogonal", "mica")
CONVERT_HINT = ("convert it to a plain LoRA with PEFT (model.save_pretrained(out, "
                "path_initial_model_for_weight_conversion=<the adapter saved before training>))")
NOT_LINEAR = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out")


def _read_config(adapter: Path) -> dict | str:
    """The adapter's config, or why it cannot be read."""
    try:
        config = json.loads((adapter / "adapter_config.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return f"adapter_config.json unreadable ({' '.join(str(exc).split())[:120]})"
    return config if isinstance(config, dict) else "adapter_config.json is not a JSON object"


def rewrites_base(init: Any) -> bool:
    return isinstance(init, str) and init.lower().startswith(BASE_REWRITING_PREFIXES)


def init_problem(config: dict) -> Optional[str]:
    """Why `init_lora_weights` makes this adapter something other than a plain delta on its base (None: it does not)."""
    init = config.get("init_lora_weights", True)
    if rewrites_base(init):
        return (f"init_lora_weights {init!r} rewrote the base weights while training, so this adapter is a delta on "
                f"that rewritten base, not on the base it names; {CONVERT_HINT}")
    if not (isinstance(init, bool) or init in PLAIN_INITS):
        return f"init_lora_weights {str(init)[:80]!r} is not one PEFT knows"
    return None


def architecture_problems(config: dict) -> list[str]:
    """Options that change the model rather than add a delta to it: no engine serves them as an adapter."""
    if config.get("layer_replication"):
        return [f"layer_replication {config['layer_replication']} (it changes the model's architecture by copying "
                "layers; engines serve adapters that only add a delta: merge it and serve the merged model)"]
    return []


def adapter_problems_for_vllm(adapter: Path, base_vocab: int | None) -> list[str]:
    """What stops vLLM from serving this PEFT adapter (empty = it fits)."""
    config = _read_config(adapter)
    if isinstance(config, str):
        return [config]
    problems = architecture_problems(config)
    if config.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type {config.get('peft_type')} (vLLM serves LoRA only)")
    if config.get("modules_to_save"):
        problems.append(f"modules_to_save {config['modules_to_save']} (vLLM only supports modules_to_save being None; "
                        "merge the adapter and serve the merged model)")
    if config.get("use_dora"):
        problems.append("DoRA (vLLM does not support use_dora; merge it, or serve with --engine builtin)")
    if config.get("bias", "none") != "none":
        problems.append(f"bias {config['bias']!r} (vLLM does not load adapter biases)")
    rank = adapter_rank(config)
    if rank > max(LORA_RANKS):
        problems.append(f"rank {rank} > {max(LORA_RANKS)}, vLLM's largest max_lora_rank")
    targets = config.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets) if isinstance(targets, list) else []
    odd = [t for t in targets if any(n in t for n in NOT_LINEAR)]
    if odd:
        problems.append(f"target_modules {odd} (vLLM applies LoRA to linear layers only)")
    problems += _resized_embeddings(adapter, base_vocab)
    return problems


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
    config = _read_config(adapter)
    if isinstance(config, str):
        return [config]
    if architecture_problems(config):
        return architecture_problems(config)
    if config.get("use_dora"):
        return ["DoRA (PEFT cannot pick a DoRA adapter per row of a shared batch: 'Cannot pass `adapter_names` when "
                "DoRA is enabled'; merge it and serve the merged model)"]
    return []


def adapter_rank(config: dict[str, Any]) -> int:
    """The largest LoRA rank in an adapter_config.json (`r`, and every per-module rank in `rank_pattern`)."""
    pattern = config.get("rank_pattern") or {}
    ranks = [config.get("r") or 0, *(pattern.values() if isinstance(pattern, dict) else [])]
    ints = [r for r in ranks if isinstance(r, int) and not isinstance(r, bool)]
    return max(ints) if ints else 0


def read_adapter_rank(adapter_dir: Path | str) -> Optional[int]:
    """adapter_rank of the adapter in `adapter_dir` (None: no readable adapter_config.json)."""
    try:
        config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
        return adapter_rank(config) or None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


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
