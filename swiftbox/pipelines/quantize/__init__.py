"""quantize step: GPTQ / AWQ (gptqmodel), bitsandbytes NF4 / int8 and FP8 (transformers) exports, each proven
with numbers and gated: size on disk vs the source, time, perplexity on held-out text before and after, logit
parity (cosine, argmax agreement) on the parity probe, eval accuracy before/after (with `eval_dataset:`), and
a look at the saved tensors (every decoder linear layer must be stored quantized). Past a tolerance the step
fails (exit 1) and nothing is written. GGUF (llama.cpp / Ollama) is written and measured by llama.cpp itself
(gguf_writer.py, with the `gguf` extra).

Pieces: calibration.py (calibration / held-out text, group size), gptqmodel_writer.py (gptq, awq),
transformers_writer.py (bnb, fp8), gguf_writer.py + gguf_adapter.py (gguf), quality.py (figures, tensor
inspection, the gate). What each method is - its capability, writer, calibration, layout, tolerances, loaders -
is its record in swiftbox/quant_methods.py; this module dispatches on it and names no method.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from swiftbox import quant_methods
from swiftbox.artifacts import is_adapter_dir
from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines.quantize.calibration import (
    BUNDLED,
    calibration_files,
    fit_group_size,
    layer_widths,
    lineage_datasets,
    read_texts,
    split_held_out,
    tokenize,
)
from swiftbox.steps import QuantizeStep

METHODS = quant_methods.METHODS     # the records (swiftbox/quant_methods.py)


class QualityGateFailed(SwiftboxError):
    """The export broke a documented tolerance (exit 1); nothing was written."""


def check(cfg: QuantizeStep, platform: Platform, input: str) -> None:
    """Refusals that need only the device (exit 3 with the alternative), and an input these writers cannot take (an
    adapter, an export already quantized: exit 2; a whole-step writer such as gguf checks its input itself)."""
    method = quant_methods.get(cfg.method)
    platform.require(method.feature)
    if input and not method.whole_step:
        check_input(input)


def dtype_plan(cfg: QuantizeStep, ctx: StepContext):
    """From the one policy: the export computes in its kernels' dtype (16-bit for GPTQ/AWQ/FP8) and the quality gate
    measures the unquantized source in that same dtype, so the gate sees the quantization, not a change of dtype."""
    from swiftbox.device import dtype_policy

    return dtype_policy.quantize(ctx.platform, cfg.dtype, sixteen_bit=quant_methods.get(cfg.method).sixteen_bit)


def check_input(ref: str):
    """The ModelSpec of `ref`, refusing adapters (merge first) and models that are already quantized."""
    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import resolve_spec

    path = resolve_model(ref)
    if is_adapter_dir(path):
        raise UserError(f"quantize: {ref} is an adapter, not a full model; merge first: ./launch.sh merge {ref} "
                        f"--output {Path(str(ref)).name}-merged, then ./launch.sh quantize "
                        f"{Path(str(ref)).name}-merged "
                        "(in a recipe: put a merge: {} step before quantize)")
    spec = resolve_spec(str(path))
    if spec.quantized:
        raise UserError(f"quantize: {ref} is already {spec.quantized}-quantized; quantize its un-quantized source "
                        "instead")
    return spec


def layout_of(cfg) -> quant_methods.Layout:
    """The on-disk layout quality.inspect_export checks for."""
    return quant_methods.get(cfg.method).layout(cfg.bits)


def accuracy(model, tokenizer, pairs: list) -> float:
    """Greedy accuracy on (messages, reference) pairs, as the eval step measures it."""
    from swiftbox.catalog.scoring import generate
    from swiftbox.data.answers import matches

    predictions = generate(model, tokenizer, [p for p, _ in pairs], 16, 16)
    return round(sum(matches(pred, ref, "exact") for pred, (_, ref) in zip(predictions, pairs)) / len(pairs), 4)


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    import gc

    from swiftbox import parity as P
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec, torch_dtype
    from swiftbox.pipelines.quantize import quality

    check(cfg, ctx.platform, ctx.input)
    method = quant_methods.get(cfg.method)
    if method.whole_step:   # its writer measures and gates itself (gguf: in llama.cpp)
        return quant_methods.resolve(method.writer)(cfg, ctx)
    spec = check_input(ctx.input)
    files, origin = calibration_files(cfg, ctx)
    pairs = []
    if cfg.eval_dataset:
        from swiftbox import data

        pairs = data.load_eval(cfg.eval_dataset, None)

    started = time.time()
    dtype = dtype_plan(cfg, ctx).compute     # the export's compute dtype; the source is measured in the same one
    tokenizer = load_tokenizer(spec, cfg.trust_remote_code)
    calib_texts, held_texts, disjoint = split_held_out(read_texts(files, tokenizer), cfg.samples)
    calib, held = tokenize(tokenizer, calib_texts, cfg.max_length), tokenize(tokenizer, held_texts, cfg.max_length)
    group_size, note = fit_group_size(cfg.group_size, layer_widths(spec.base)) if method.calibrated else (-1, None)
    probe = P.encode(tokenizer, P.render(tokenizer, P.default_probe()))

    source = load_model(spec, ctx.platform, dtype, trust_remote_code=cfg.trust_remote_code)
    ppl_before, logits_before = quality.perplexity(source, held), P.logits_on(source, probe)
    acc_before = accuracy(source, tokenizer, pairs) if pairs else None
    del source
    gc.collect()

    write = quant_methods.resolve(method.writer)
    t0 = time.time()
    facts = write(cfg, spec, ctx, tokenizer, calib, torch_dtype(dtype), group_size)
    quantize_seconds = time.time() - t0
    tokenizer.save_pretrained(ctx.work_dir)
    if (spec.base / "generation_config.json").is_file():  # gptqmodel rewrites it (e.g. turns sampling on)
        shutil.copyfile(spec.base / "generation_config.json", Path(ctx.work_dir) / "generation_config.json")

    inspection = quality.inspect_export(spec.base, ctx.work_dir, layout_of(cfg))
    metrics: dict = {"method": cfg.method, "bits": cfg.bits}
    if not inspection["error"]:
        quantized = load_model(resolve_spec(str(ctx.work_dir)), ctx.platform, dtype)  # proves the output loads
        ppl_after = quality.perplexity(quantized, held)
        agreement = P.compare(logits_before, P.logits_on(quantized, probe), probe["attention_mask"])
        acc_after = accuracy(quantized, tokenizer, pairs) if pairs else None
        del quantized
        size, source_size = quality.weight_bytes(ctx.work_dir), quality.weight_bytes(spec.base)
        metrics.update({
            "group_size": group_size,
            "size_bytes": size, "source_size_bytes": source_size, "size_ratio": size / max(source_size, 1),
            "quantize_seconds": round(quantize_seconds, 3), "seconds": round(time.time() - started, 3),
            "perplexity_before": ppl_before, "perplexity_after": ppl_after, "perplexity_ratio": ppl_after / ppl_before,
            "cosine_mean": agreement["cosine_mean"], "cosine_min": agreement["cosine_min"],
            "argmax_agreement": agreement["argmax_agreement"],
            "quantized_modules": inspection["quantized_modules"], "linear_modules": inspection["linear_modules"],
            "calibration_samples": len(calib) if method.calibrated else 0, "held_out_samples": len(held),
        })
        if acc_before is not None and acc_after is not None:
            metrics.update(accuracy_before=acc_before, accuracy_after=acc_after, accuracy_drop=acc_before - acc_after)
    tol = quality.tolerances(cfg.bits or method.bits[0], cfg.tolerance.model_dump(), cfg.method)
    broken = quality.gate(metrics, inspection, tol)
    if broken:
        raise QualityGateFailed(f"quantize: the {cfg.method} {cfg.bits}-bit export fails its quality gate: "
                                f"{'; '.join(broken)}; nothing was written (tolerances: docs/export.md, "
                                "or set quantize.tolerance.*)")
    quantization = {"method": cfg.method, "bits": cfg.bits, **facts, "tolerances": tol,
                    "calibration": [str(f) for f in files], "calibration_source": origin,
                    "held_out_disjoint": disjoint, "loads_with": loaders(cfg.method)}
    if note:
        quantization["note"] = note
    return StepResult(metrics=metrics, info={"artifact": "model", "quantization": quantization,
                                             "source_model": str(spec.base), "dtype": dtype})


def loaders(method: str) -> list[str]:
    """Which loaders open an export of `method` on this machine (docs/export.md has the full table)."""
    return quant_methods.get(method).loaders()


PIPELINE = declare("quantize", QuantizeStep, produces_model=True, check=check, run=run, dtypes=dtype_plan)

__all__ = [
    "BUNDLED",
    "METHODS",
    "QualityGateFailed",
    "calibration_files",
    "check",
    "check_input",
    "fit_group_size",
    "layer_widths",
    "lineage_datasets",
    "read_texts",
    "run",
    "split_held_out",
    "tokenize",
]
