"""verify, section "engine": can the chosen engine load this artifact on this platform? The facts come from
swiftbox/serving/fit.py (the one home of what each engine serves); this module writes them into the report."""
from __future__ import annotations

from pathlib import Path

from swiftbox.serving import fit
from swiftbox.verify.report import Report


def check_adapters(report: Report, adapters: list[Path], engine: str, base_vocab: int | None) -> None:
    for i, adapter in enumerate(adapters):
        if engine == "builtin":  # all but the last are merged in at load time; the last stays attached
            problems = fit.adapter_problems_for_builtin(adapter) if i == len(adapters) - 1 else []
            report.add("engine", f"adapter {adapter.name} on builtin", not problems,
                       "; ".join(problems) or "PEFT serves it per request (LoRA, modules_to_save)")
            continue
        problems = fit.adapter_problems_for_vllm(adapter, base_vocab)
        report.add("engine", f"adapter {adapter.name} on vllm", not problems,
                   "; ".join(problems) or "within vLLM's LoRA limits")


def check_quantization(report: Report, quant: str | None, engine: str, platform) -> None:
    if not quant:
        report.add("engine", f"weights on {engine}", True, "not quantized")
        return
    ok, label, detail = fit.quantization_fit(quant, engine, platform)
    report.add("engine", label, ok, detail)
