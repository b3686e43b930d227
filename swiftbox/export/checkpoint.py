"""The measured export of a transformers checkpoint (gptq, awq, bnb, fp8): calibrate, measure the source, call the
method's writer (its record's `writer`, swiftbox/quant_methods.py), inspect the saved tensors, measure the export,
gate. Figures: size on disk vs the source, time, perplexity on held-out text before and after, logit parity (cosine,
argmax agreement) on the parity probe, eval accuracy before/after (with `eval_dataset:`), and every decoder linear
layer stored quantized. Past a tolerance the step fails (exit 1) and nothing is written. Names no method.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from swiftbox import quant_methods
from swiftbox.contract import StepContext, StepResult
from swiftbox.export.calibration import fit_group_size, layer_widths, read_texts, split_held_out, tokenize
from swiftbox.export.checks import ExportPlan
from swiftbox.export.quality import QualityGateFailed
from swiftbox.steps import QuantizeStep


def layout_of(cfg) -> quant_methods.Layout:
    """The on-disk layout quality.inspect_export checks for."""
    return quant_methods.get(cfg.method).layout(cfg.bits)


def accuracy(model, tokenizer, pairs: list) -> float:
    """Greedy accuracy on (messages, reference) pairs, as the eval step measures it."""
    from swiftbox.catalog.scoring import generate
    from swiftbox.data.answers import matches

    predictions = generate(model, tokenizer, [p for p, _ in pairs], 16, 16)
    return round(sum(matches(pred, ref, "exact") for pred, (_, ref) in zip(predictions, pairs)) / len(pairs), 4)


def loaders(method: str) -> list[str]:
    """Which loaders open an export of `method` on this machine (docs/export.md has the full table)."""
    return quant_methods.get(method).loaders()


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    """Export the model the step's check resolved (`ctx.plan`, an ExportPlan: source, calibration files, dtypes)
    into `ctx.work_dir`, computing in the plan's dtype; nothing here re-checks the input."""
    import gc

    from swiftbox import parity as P
    from swiftbox.export import quality
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec, torch_dtype

    method = quant_methods.get(cfg.method)
    planned = ctx.plan_as(ExportPlan)
    spec, files = planned.source, list(planned.calibration)
    if planned.dtypes is None:
        raise TypeError("quantize: the plan carries no dtype plan (run the step through the runner)")
    dtype = planned.dtypes.compute   # the export's compute dtype; the source is measured in the same one
    pairs = []
    if cfg.eval_dataset:
        from swiftbox import data

        pairs = data.load_eval(cfg.eval_dataset, None)

    started = time.time()
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
                    "calibration": [str(f) for f in files], "calibration_source": planned.calibration_source,
                    "held_out_disjoint": disjoint, "loads_with": loaders(cfg.method)}
    if note:
        quantization["note"] = note
    return StepResult(metrics=metrics, info={"artifact": "model", "quantization": quantization,
                                             "source_model": str(spec.base)})
