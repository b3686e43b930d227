"""merge step: fold LoRA / DoRA / QLoRA adapters into their base model with PEFT `merge_and_unload`.

The base comes from `base:` or the adapter's manifest / adapter_config.json. A QLoRA adapter merges
onto the un-quantized base (never into 4-bit weights). Several adapters
merge in order, each onto the result of the ones before it. Every merge is verified on a fixed probe:
base+adapter (unmerged) vs merged in memory, and the saved output reloaded from disk vs base+adapters;
the largest |Δlogit| is recorded as `max_abs_logit_diff` and a merge past the tolerance fails, so no
silently wrong output is ever committed.

Dtypes follow the one policy (swiftbox/device/dtype_policy.py): merged and checked in float32 whatever the
adapters were trained in, saved in the source model's dtype (or `dtype:`). The reloaded output is compared with the
merged weights rounded to that save dtype (still computed in float32), so every gate is exact - like with like -
and what the rounding itself costs is reported (`save_rounding_*`), not mistaken for a fault.
"""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from swiftbox.artifacts import dir_size, is_adapter_dir, read_manifest
from swiftbox.contract import Plan, StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.modeling.loading import ModelSpec
from swiftbox.steps import MergeStep


def adapter_chain(refs: list[str], base: str | None) -> tuple[ModelSpec, list[Path]]:
    """(ModelSpec, adapter paths in merge order) for `refs`; refusals for anything that cannot merge."""
    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import adapter_base_ref, resolve_spec

    spec: Optional[ModelSpec] = None
    adapters: list[Path] = []
    for ref in refs:
        path = resolve_model(ref)
        if not is_adapter_dir(path):
            quant = _quantized(path)
            what = f"an already {quant}-quantized model" if quant else "a model"
            raise UserError(f"merge: {ref} is {what}, not an adapter (no adapter_config.json); nothing to merge - "
                            "pass the adapter directory (adapters: [...] / --adapters)")
        base_ref = base or adapter_base_ref(path)
        try:
            resolve_model(base_ref)
        except UserError as exc:
            raise UserError(f"merge: the base model of adapter {ref}, {base_ref!r}, cannot be found "
                            f"({' '.join(str(exc).split())}); pass base: (--base) with the model it was trained "
                            "on") from None
        this = resolve_spec(str(path), base=base)
        if spec is None:
            spec = this
        elif this.base.resolve() != spec.base.resolve():
            raise UserError(f"merge: adapter {ref} was trained on {this.base_ref}, but {refs[0]} on {spec.base_ref}; "
                            "adapters merged together must share one base")
        adapters += [a for a in this.adapters if a.resolve() not in {x.resolve() for x in adapters}]
    if spec is None:
        raise UserError("merge: no adapter to merge; pass adapters: [...] / --adapters")
    if spec.quantized:
        raise UserError(f"merge: the base model {spec.base_ref} is already {spec.quantized}-quantized; merging into "
                        "quantized weights cannot keep the adapter's outputs - pass the un-quantized base with "
                        "base: (--base) and quantize after merging")
    return spec, adapters


def _quantized(path: Path) -> str | None:
    import json

    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return (config.get("quantization_config") or {}).get("quant_method")


@dataclass(frozen=True, kw_only=True)
class MergePlan(Plan):
    """The chain check resolved: the base (spec) and the adapters in merge order; run merges exactly these."""

    spec: ModelSpec
    adapters: tuple[Path, ...]


def check(cfg: MergeStep, platform: Platform, input: str) -> MergePlan:
    """Every refusal of the adapters and their base (not adapters, missing base, mixed bases, a quantized base)
    before any output exists, and the plan run follows: the chain, resolved here once, and the dtypes from the one
    policy (float32 compute and check, saved in the source model's dtype or `dtype:`; the manifest's dtype)."""
    from swiftbox.device import dtype_policy

    spec, adapters = adapter_chain(list(cfg.adapters or [input]), cfg.base)
    dtypes = dtype_policy.merge(platform, cfg.dtype, dtype_policy.source_dtype(spec.base))
    return MergePlan(dtypes=dtypes, dtype=dtypes.save, spec=spec, adapters=tuple(adapters))


def run(cfg: MergeStep, ctx: StepContext) -> StepResult:
    started = time.time()
    plan = ctx.plan_as(MergePlan)
    spec, adapters, dtypes = plan.spec, list(plan.adapters), plan.dtypes
    if dtypes is None:
        raise TypeError("merge: the plan has no dtypes (check() plans them)")

    from peft import PeftModel

    from swiftbox import parity as P
    from swiftbox.device import dtype_policy
    from swiftbox.modeling.loading import load_model, load_tokenizer, torch_dtype

    dtype, save = dtypes.compute, dtypes.save or dtypes.compute     # float32; the source's dtype (or `dtype:`)
    tolerance = cfg.tolerance or dtype_policy.relative_tolerance(dtype)
    tokenizer = load_tokenizer(spec, cfg.trust_remote_code)
    items = P.read_probe(cfg.probe) if cfg.probe else P.default_probe()
    batch = P.encode(tokenizer, P.render(tokenizer, items))
    mask = batch["attention_mask"]

    model = load_model(ModelSpec(base=spec.base, base_ref=spec.base_ref), ctx.platform, dtype,
                       trust_remote_code=cfg.trust_remote_code)
    base_logits = P.logits_on(model, batch)
    stages: list[dict] = []
    reference: Any = None
    stored: Any = None
    for adapter in adapters:
        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
        model.eval()
        reference = P.logits_on(model, batch)  # base (+ earlier merges) + this adapter, unmerged
        model = model.merge_and_unload()
        stored = P.logits_on(model, batch)
        stages.append({"adapter": str(adapter), **P.compare(reference, stored, mask)})

    merged = stored
    if save != dtype:   # the weights as the file will hold them (rounded to the save dtype), still computed in float32
        P.round_weights(model, save)
        stored = P.logits_on(model, batch)
        model.to(torch_dtype(save))
    rounding = P.compare(merged, stored, mask)    # what rounding to the save dtype changes: reported, not a fault
    model.save_pretrained(ctx.work_dir, max_shard_size=cfg.max_shard_size)
    tokenizer.save_pretrained(ctx.work_dir)
    del model
    gc.collect()
    ctx.platform.empty_cache()

    # the output as the next step will see it, computed in the same float32, against the merged weights as saved:
    # like with like, so any difference is a fault of the file (a missing tied weight, a wrong shard), not rounding
    reloaded = load_model(ModelSpec(base=Path(ctx.work_dir), base_ref=str(ctx.output)), ctx.platform, dtype)
    on_disk = P.compare(stored, P.logits_on(reloaded, batch), mask)
    del reloaded

    diffs = [s["max_abs_diff"] for s in stages] + [on_disk["max_abs_diff"]]
    worst = max(diffs) if all(math.isfinite(d) for d in diffs) else float("nan")   # max() would drop a NaN
    top = float(reference[mask.bool()].abs().max())
    if not (math.isfinite(top) and math.isfinite(rounding["max_abs_diff"])):
        where = "base+adapter" if not math.isfinite(top) else f"the merged weights in {save}"
        raise SwiftboxError(f"merge: {where} give non-finite logits (NaN/inf weights in the adapter, or values "
                            f"past {save}'s range?); nothing was written")
    scale = max(1.0, top)
    effect = P.compare(base_logits, reference, mask)
    checks = [*((f"the merged model (adapter {i + 1})", st) for i, st in enumerate(stages)),
              (f"the saved output, reloaded (against the merged weights in {save})", on_disk)]
    for what, figures in checks:
        if not figures["max_abs_diff"] / scale <= tolerance:  # NaN-safe: a NaN difference fails
            raise SwiftboxError(f"merge: verification failed: max |Δlogit| {figures['max_abs_diff']:.3g} between "
                                f"base+adapter and {what} exceeds the tolerance {tolerance:g} (x {scale:.3g}) in "
                                f"{dtype}; nothing was written")
    methods = [(read_manifest(a) or {}).get("method") or _peft_type(a) for a in adapters]
    metrics = {
        "max_abs_logit_diff": worst,
        "relative_logit_diff": worst / scale,
        "cosine_min": min([s["cosine_min"] for s in stages] + [on_disk["cosine_min"]]),
        "argmax_agreement": rounding["argmax_agreement"],
        "save_rounding_max_abs": rounding["max_abs_diff"],  # the merged weights vs them rounded to the save dtype
        "save_rounding_relative": rounding["max_abs_diff"] / scale,
        "adapter_effect_max_abs": effect["max_abs_diff"],  # how far the adapters move the base: > 0 or nothing merged
        "adapters": len(adapters),
        "probe_positions": on_disk["positions"],
        "size_bytes": dir_size(ctx.work_dir),
        "seconds": round(time.time() - started, 3),
    }
    info = {"artifact": "model", "merged_from": [str(a) for a in adapters], "base_model": spec.base_ref,
            "methods": methods, "compute_dtype": dtype, "datasets": _datasets(adapters),
            "merge_stages": stages, "tolerance": tolerance}
    return StepResult(metrics=metrics, info=info)


def _peft_type(adapter: Path) -> str:
    from swiftbox.modeling.adapter_file import AdapterFile

    return AdapterFile.read(adapter).kind      # a malformed config: one line naming the file and the field


def _datasets(adapters: list[Path]) -> list[str]:
    """Training data named by the adapters' manifests (quantize calibrates on it by default)."""
    out: list[str] = []
    for adapter in adapters:
        manifest = read_manifest(adapter) or {}
        for value in (manifest.get("datasets"), (manifest.get("config") or {}).get("dataset")):
            for item in ([value] if isinstance(value, str) else value or []):
                if isinstance(item, str) and item not in out:
                    out.append(item)
    return out


PIPELINE = declare("merge", MergeStep, produces_model=True, check=check, run=run)
