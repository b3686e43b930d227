"""verify, section "engine": can the chosen engine load this artifact on this platform?

LoRA adapters against vLLM's limits (vllm/lora/peft_helper.py refuses `modules_to_save`, DoRA and adapter
bias; ranks above its largest `max_lora_rank` 512; LoRA only on linear layers, so no embedding/lm_head
targets or resized vocabularies) - vllm-ascend reuses vLLM's LoRA code, so the same limits hold on NPU.
The built-in engine serves what PEFT can pick per row of a batch (not DoRA: merge it first).
Quantized checkpoints against what the engine runs here
(the platform's capability matrix and its `vllm_quantizations`).
"""
from __future__ import annotations

import json
from pathlib import Path

from swiftbox.verify.report import Report

NOT_LINEAR = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out")
QUANT_FEATURE = {"gptq": "gptq", "awq": "awq", "bitsandbytes": "bnb", "fp8": "fp8"}


def _read_config(adapter: Path) -> dict | str:
    """The adapter's config, or why it cannot be read."""
    try:
        config = json.loads((adapter / "adapter_config.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return f"adapter_config.json unreadable ({' '.join(str(exc).split())[:120]})"
    return config if isinstance(config, dict) else "adapter_config.json is not a JSON object"


def architecture_problems(config: dict) -> list[str]:
    """Options that change the model rather than add a delta to it: no engine serves them as an adapter."""
    if config.get("layer_replication"):
        return [f"layer_replication {config['layer_replication']} (it changes the model's architecture by copying "
                "layers; engines serve adapters that only add a delta: merge it and serve the merged model)"]
    return []


def adapter_problems_for_vllm(adapter: Path, base_vocab: int | None) -> list[str]:
    """What stops vLLM from serving this PEFT adapter (empty = it fits)."""
    from swiftbox.pipelines.serve.engine_vllm import LORA_RANKS

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
    ranks = [config.get("r") or 0, *(config.get("rank_pattern") or {}).values()]
    rank = max(r for r in ranks if isinstance(r, int)) if any(isinstance(r, int) for r in ranks) else 0
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


def check_adapters(report: Report, adapters: list[Path], engine: str, base_vocab: int | None) -> None:
    for i, adapter in enumerate(adapters):
        if engine == "builtin":  # all but the last are merged in at load time; the last stays attached
            problems = adapter_problems_for_builtin(adapter) if i == len(adapters) - 1 else []
            report.add("engine", f"adapter {adapter.name} on builtin", not problems,
                       "; ".join(problems) or "PEFT serves it per request (LoRA, modules_to_save)")
            continue
        problems = adapter_problems_for_vllm(adapter, base_vocab)
        report.add("engine", f"adapter {adapter.name} on vllm", not problems,
                   "; ".join(problems) or "within vLLM's LoRA limits")


def check_quantization(report: Report, quant: str | None, engine: str, platform) -> None:
    if not quant:
        report.add("engine", f"weights on {engine}", True, "not quantized")
        return
    if engine == "vllm":
        ok = quant in platform.vllm_quantizations
        report.add("engine", f"{quant} on {platform.vllm_package} ({platform.name})", ok,
                   f"{platform.vllm_package} serves {quant} checkpoints" if ok else
                   f"{platform.vllm_package} does not serve {quant} checkpoints here; "
                   f"{platform.vllm_quantization_instead}")
        return
    feature = QUANT_FEATURE.get(quant)
    if feature is None:
        report.add("engine", f"{quant} on builtin", False, f"unknown quant_method {quant!r}: the built-in engine "
                   "loads gptq, awq, bitsandbytes and fp8 checkpoints")
        return
    refusal = platform.why_not(feature)
    if refusal is not None and feature == "fp8":
        report.add("engine", f"fp8 on builtin ({platform.name})", True,
                   f"transformers dequantizes FP8 to bf16 here ({refusal.why}): it runs, without FP8's savings")
        return
    report.add("engine", f"{quant} on builtin ({platform.name})", refusal is None,
               "loads here" if refusal is None else f"{refusal.why}; use {refusal.instead}")
