"""`quantize --method gguf --adapter-only`: a PEFT LoRA adapter as a GGUF LoRA (llama.cpp's
convert_lora_to_gguf.py), beside its base model as a GGUF, for `llama-server -m BASE.gguf --lora LORA.gguf` and
Ollama's `FROM` + `ADAPTER` - no merge.

Proof, in llama.cpp: the base GGUF with the LoRA applied (`Llama(lora_path=...)`) against base+adapter in torch
(perplexity on held-out rows, cosine / argmax on the probe, greedy continuations), and the LoRA must move
llama.cpp's logits toward torch's adapted ones (`lora_applied`): a LoRA that loads but changes nothing fails.
Refused: DoRA, `modules_to_save`, a chain of adapters (GGUF LoRA holds plain A/B matrices of one adapter) and
k-quant types (a GGUF LoRA is f16, bf16 or q8_0).
"""
from __future__ import annotations

import gc
import time
from pathlib import Path

from swiftbox.artifacts import is_adapter_dir
from swiftbox.contract import StepContext, StepResult
from swiftbox.errors import Unsupported, UserError
from swiftbox.export.checks import ExportPlan, check_input, plan
from swiftbox.modeling.adapter_file import AdapterFile, AdapterFileError, limits
from swiftbox.steps import QuantizeStep

ADAPTER_TYPES = ("f16", "bf16", "q8_0")


def adapter_problems(adapter: Path) -> list[str]:
    """What a GGUF LoRA cannot hold (empty: it converts)."""
    try:
        return limits(AdapterFile.read(adapter), "gguf")
    except AdapterFileError as exc:
        return [exc.reason]


def check_adapter(cfg: QuantizeStep, ref: str):
    """The adapter's ModelSpec, refusing what a GGUF LoRA cannot be."""
    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import resolve_spec

    path = resolve_model(ref)
    if not is_adapter_dir(path):
        raise UserError(f"quantize --adapter-only: {ref} is a full model, not a LoRA adapter; drop --adapter-only to "
                        "export the whole model")
    if cfg.type not in ADAPTER_TYPES:
        raise UserError(f"quantize --adapter-only: type {cfg.type} is not available for a GGUF LoRA; expected "
                        f"{', '.join(ADAPTER_TYPES)}")
    spec = resolve_spec(str(path))
    if len(spec.adapters) > 1:
        raise Unsupported(f"quantize --adapter-only: {ref} sits on {len(spec.adapters) - 1} other adapter(s); a GGUF "
                          "LoRA is one adapter on a base: merge the chain (./launch.sh merge) and export the merged "
                          "model with --method gguf instead")
    problems = adapter_problems(path)
    if problems:
        raise Unsupported(f"quantize --adapter-only: {ref} cannot be a GGUF LoRA: {'; '.join(problems)}; merge it "
                          f"(./launch.sh merge {ref}) and export the merged model with --method gguf instead")
    if spec.quantized:
        raise UserError(f"quantize --adapter-only: the base {spec.base} is {spec.quantized}-quantized; pass the "
                        "un-quantized base with --base")
    return spec


def check(cfg: QuantizeStep, ref: str) -> ExportPlan:
    """The gguf record's check (swiftbox/quant_methods.py), run by quantize's `check` before anything is written:
    with --adapter-only a LoRA adapter a GGUF LoRA can hold, else a full unquantized model (an adapter: merge first);
    either way an architecture llama.cpp's converter knows (exit 3 naming the alternative), and the held-out data."""
    from swiftbox.export.llamacpp import convert

    if cfg.adapter_only:
        spec = check_adapter(cfg, ref)
    else:
        if Path(str(ref)).is_dir() and is_adapter_dir(Path(str(ref))):
            name = Path(str(ref)).name
            raise UserError(f"quantize: {ref} is an adapter, not a full model; merge first: ./launch.sh merge "
                            f"{ref} --output {name}-merged, then ./launch.sh quantize {name}-merged --method gguf "
                            "(or --adapter-only for a GGUF LoRA; in a recipe: put a merge: {} step before quantize)")
        spec = check_input(ref)
    convert.check_architecture(spec.base, convert.ensure_tree())
    return plan(cfg, spec, ref)


def run_step(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    """The gguf record's writer (swiftbox/quant_methods.py): a LoRA adapter alone (--adapter-only), else the whole
    model (writers/gguf.py run); each measures and gates itself in llama.cpp."""
    if cfg.adapter_only:
        return run_adapter(cfg, ctx)
    from swiftbox.export.writers import gguf

    return gguf.run(cfg, ctx)


def run_adapter(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    """The adapter checked by `check` (ctx.plan) -> base GGUF + GGUF LoRA, measured and gated in llama.cpp."""
    from dataclasses import replace

    import numpy as np

    from swiftbox.export import quality
    from swiftbox.export.llamacpp import convert, gguf_file, modelfile, runner
    from swiftbox.export.quality import QualityGateFailed
    from swiftbox.export.writers.gguf import (
        REFERENCE_DTYPE,
        _tool_facts,
        compare,
        file_stem,
        gate,
        llamacpp_figures,
        measured_inputs,
        tolerances,
        torch_figures,
    )
    from swiftbox.modeling.loading import load_model

    started = time.time()
    planned = ctx.plan_as(ExportPlan)
    spec = planned.source
    adapter = spec.adapters[0]
    inputs = measured_inputs(cfg, spec, planned)
    held, probe, stops = inputs.held, inputs.probe, inputs.stops

    model = load_model(spec, ctx.platform, REFERENCE_DTYPE, trust_remote_code=cfg.trust_remote_code)
    before = torch_figures(model, held, probe, stops)
    del model
    base_model = load_model(replace(spec, adapters=[]), ctx.platform, REFERENCE_DTYPE,
                            trust_remote_code=cfg.trust_remote_code)
    base_torch = torch_figures(base_model, held[:1], probe, stops)
    del base_model
    gc.collect()

    work = Path(ctx.work_dir)
    gguf_type = cfg.type or "f16"
    base_out = work / f"{file_stem(ctx.input if not cfg.adapter_only else spec.base_ref)}-{gguf_type}.gguf"
    lora_out = work / f"{adapter.name}-lora-{gguf_type}.gguf"
    log = work / "logs" / "llama.cpp.log"
    t0 = time.time()
    convert.convert_model(spec.base, base_out, gguf_type, log)
    convert.convert_lora(adapter, spec.base, lora_out, gguf_type, log)
    quantize_seconds = time.time() - t0

    info = gguf_file.read(lora_out)
    after = llamacpp_figures(base_out, held, probe, stops, inputs.check_texts, inputs.check_ids, lora=lora_out)
    with runner.load(base_out, n_ctx=max(len(p) for p in probe) + 8) as base_gguf:
        plain = [base_gguf.logits(ids) for ids in probe]
    ref = np.concatenate(before["logits"])
    with_lora = float(np.abs(np.concatenate(after["logits"]) - ref).mean())
    without = float(np.abs(np.concatenate(plain) - ref).mean())
    effect = float(np.abs(np.concatenate(base_torch["logits"]) - ref).max())
    metrics: dict = {
        "method": "gguf", "type": gguf_type, "adapter_only": True,
        "size_bytes": lora_out.stat().st_size, "base_size_bytes": base_out.stat().st_size,
        "source_size_bytes": quality.weight_bytes(adapter),
        "size_ratio": lora_out.stat().st_size / max(quality.weight_bytes(adapter), 1),
        "quantize_seconds": round(quantize_seconds, 3), "seconds": round(time.time() - started, 3),
        "perplexity_before": before["perplexity"], "perplexity_after": after["perplexity"],
        "perplexity_ratio": after["perplexity"] / before["perplexity"], **compare(before, after),
        "tokenizer_agreement": after["tokenizer_agreement"], "adapter_effect_max_abs": effect,
        "mean_abs_diff_with_lora": with_lora, "mean_abs_diff_without_lora": without,
        "lora_applied": bool(effect < 1e-4 or with_lora < 0.5 * without),
        "lora_tensors": info.tensor_count, "held_out_samples": len(held), "probe_prompts": len(probe),
    }
    tol = tolerances(cfg)
    tol.setdefault("max_size_ratio", 1.5)   # f16/q8_0 of the adapter's own float32/bf16 matrices, plus metadata
    inspection = {"quantized_modules": 1, "linear_modules": 1, "unquantized": [],
                  "error": None if info.general_type == "adapter" else
                  f"{lora_out.name} is not a GGUF adapter (general.type {info.general_type!r})"}
    broken = gate({**metrics, "tokenizer_first_diff": after.get("tokenizer_first_diff")}, inspection, tol)
    if not metrics["lora_applied"]:
        broken.append(f"the GGUF LoRA does not move llama.cpp toward the adapted model (mean |Δlogit| {with_lora:.3g} "
                      f"with it vs {without:.3g} without)")
    if broken:
        raise QualityGateFailed(f"quantize: the GGUF LoRA export fails its quality gate: {'; '.join(broken)}; nothing "
                                "was written (tolerances: docs/export.md, or set quantize.tolerance.*)")
    mf, template_facts = modelfile.build(base_out.name, inputs.tokenizer, spec.base, adapter_name=lora_out.name,
                                         adds_bos=gguf_file.read(base_out).adds_bos)
    (work / "Modelfile").write_text(mf.text(), encoding="utf-8")
    quantization = {"method": "gguf", "type": gguf_type, "adapter_only": True, "file": lora_out.name,
                    "base_file": base_out.name, "lora_alpha": info.meta.get("adapter.lora.alpha"),
                    **_tool_facts(), "tolerances": tol, "held_out": [str(f) for f in planned.calibration],
                    "held_out_source": planned.calibration_source, "held_out_disjoint": inputs.disjoint,
                    "modelfile": template_facts,
                    "loads_with": ["llama.cpp (--lora)", "ollama (ADAPTER)"]}
    return StepResult(metrics=metrics, info={"artifact": "gguf-lora", "quantization": quantization,
                                             "source_model": str(spec.base), "adapter": str(adapter)})
