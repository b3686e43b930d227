"""quantize step: GPTQ 4/8-bit export with gptqmodel (auto-gptq is end-of-life and cannot import with
transformers 5), proven with numbers: size on disk vs the source, time, perplexity on held-out text before
and after, and logit parity (cosine, argmax agreement) on the parity probe.

Calibration data: `dataset:`, else the training data named in the lineage's manifests, else the bundled
text. The output is a plain transformers checkpoint with a `quantization_config` (quant_method gptq):
transformers loads it when `optimum` is installed, gptqmodel loads it always (see docs/export.md).
"""
from __future__ import annotations

import json
import math
import random
import shutil
import time
from pathlib import Path

from swiftbox.artifacts import is_adapter_dir
from swiftbox.compat import gptqmodel_env, gptqmodel_log_dir
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import QuantizeStep

BUNDLED = Path(__file__).resolve().parent.parent / "assets" / "toy_corpus.txt"
WEIGHT_SUFFIXES = (".safetensors", ".bin")
MAX_HELD_OUT = 32


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


def calibration_files(cfg, ctx) -> tuple[list[Path], str]:
    """(files, where they came from): the user's dataset, the lineage's training data, or bundled text."""
    if cfg.dataset:
        path = _data_path(cfg.dataset)
        if not path.is_file():
            raise UserError(f"quantize.dataset: calibration file {cfg.dataset} not found; expected a .jsonl/.json/.txt "
                            "file")
        return [path], "dataset"
    named = lineage_datasets(ctx.lineage())
    if named:
        found = [p for p in (_data_path(n) for n in named) if p.is_file()]
        if not found:
            raise UserError(f"quantize: missing calibration data: the training data in the lineage "
                            f"({', '.join(named)}) "
                            "is not on disk; pass dataset: (--dataset) with a .jsonl/.txt file")
        return found, "lineage"
    if not BUNDLED.is_file():
        raise UserError("quantize: missing calibration data: pass dataset: (--dataset) with a .jsonl/.txt file")
    return [BUNDLED], "bundled"


def lineage_datasets(manifests: list[dict]) -> list[str]:
    """Training data named by the nearest manifest that names any (`datasets` or `config.dataset`)."""
    for manifest in manifests:
        names: list[str] = []
        for value in (manifest.get("datasets"), (manifest.get("config") or {}).get("dataset")):
            for item in ([value] if isinstance(value, str) else value or []):
                if isinstance(item, str) and item not in names:
                    names.append(item)
        if names:
            return names
    return []


def _data_path(name: str) -> Path:
    """'path#N' (sample syntax of the training steps) -> path."""
    base, _, count = name.rpartition("#")
    return Path(base if base and count.isdigit() else name).expanduser()


def read_texts(files: list[Path], tokenizer) -> list[str]:
    """Calibration texts: chat rows rendered with the tokenizer's template, plain rows and lines as they are."""
    texts: list[str] = []
    for file in files:
        raw = file.read_text(encoding="utf-8", errors="replace")
        if file.suffix not in (".jsonl", ".json"):
            texts += [line.strip() for line in raw.splitlines() if line.strip()]
            continue
        try:
            lines = [ln for ln in raw.splitlines() if ln.strip()]
            rows = json.loads(raw) if file.suffix == ".json" else [json.loads(ln) for ln in lines]
        except json.JSONDecodeError as exc:
            raise UserError(f"quantize: calibration file {file} is not valid JSON ({exc.msg}, line "
                            f"{exc.lineno})") from None
        for row in rows if isinstance(rows, list) else []:
            text = _row_text(row, tokenizer) if isinstance(row, dict) else None
            if text:
                texts.append(text)
    if not texts:
        raise UserError(f"quantize: missing calibration data: no usable rows in {', '.join(map(str, files))} "
                        "(expected messages, conversations, prompt/chosen, instruction/output, query/response or text)")
    return texts


def _row_text(row: dict, tokenizer) -> str | None:
    messages = row.get("messages")
    if not isinstance(messages, list) and isinstance(row.get("conversations"), list):
        roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
        messages = [{"role": roles.get(m.get("from"), "user"), "content": m.get("value", "")}
                    for m in row["conversations"]]
    if not isinstance(messages, list):
        for prompt_key, answer_key in (("prompt", "chosen"), ("instruction", "output"), ("query", "response")):
            if isinstance(row.get(prompt_key), str):
                prompt = row[prompt_key] + (("\n" + row["input"]) if row.get("input") else "")
                messages = [{"role": "user", "content": prompt}]
                if isinstance(row.get(answer_key), str):
                    messages.append({"role": "assistant", "content": row[answer_key]})
                break
    if isinstance(messages, list) and messages:
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    text = row.get("text")
    return text if isinstance(text, str) and text.strip() else None


def split_held_out(texts: list[str], samples: int) -> tuple[list[str], list[str], bool]:
    """(calibration, held-out, held_out_is_disjoint): a fixed shuffle; held-out rows never calibrate."""
    rows = list(texts)
    random.Random(0).shuffle(rows)
    if len(rows) < 2:
        return rows[:samples], rows, False
    held = min(MAX_HELD_OUT, max(1, len(rows) // 8))
    return rows[held:held + samples], rows[:held], True


def layer_widths(model_dir: Path) -> set[int]:
    """Input widths of the decoder's linear layers, from config.json (what a group size must divide)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return set()
    config = config.get("text_config", config)
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    widths = {hidden, config.get("intermediate_size"), config.get("moe_intermediate_size")}
    if hidden and heads:
        widths.add(heads * (config.get("head_dim") or hidden // heads))
    return {w for w in widths if isinstance(w, int) and w > 0}


def fit_group_size(group_size: int, widths: set[int]) -> tuple[int, str | None]:
    """The largest power-of-two group size <= the requested one dividing every width (-1 stays -1)."""
    if group_size == -1 or all(w % group_size == 0 for w in widths):
        return group_size, None
    size = 1 << (group_size.bit_length() - 1)
    while size > 8 and any(w % size for w in widths):
        size //= 2
    if any(w % size for w in widths):
        return -1, f"group_size {group_size} divides no layer width {sorted(widths)}; using per-channel (-1)"
    return size, f"group_size {group_size} does not divide the layer widths {sorted(widths)}; using {size}"


def tokenize(tokenizer, texts: list[str], max_length: int) -> list[dict]:
    out = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False, truncation=True, max_length=max_length)["input_ids"]
        if ids:
            out.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
    return out


def perplexity(model, rows: list[dict]) -> float:
    """exp(mean token negative log-likelihood) over `rows`."""
    import math

    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row["input_ids"]], device=device)
            if ids.shape[1] < 2:
                continue
            logits = model(input_ids=ids).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            total, count = total + float(loss), count + ids.shape[1] - 1
    return math.exp(total / max(count, 1))


def weight_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def check(cfg: QuantizeStep, platform: Platform) -> None:
    platform.require("gptq")


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    spec = check_input(ctx.input)
    files, origin = calibration_files(cfg, ctx)

    gptqmodel_env()
    import gc

    from gptqmodel import GPTQModel, QuantizeConfig

    from swiftbox import parity as P
    from swiftbox.modeling.loading import (
        gptq_dtype,
        load_model,
        load_tokenizer,
        resolve_spec,
        torch_dtype,
        transformers_loads_gptq,
    )

    started = time.time()
    dtype = gptq_dtype(ctx.platform, ctx.dtype(cfg.dtype))
    tokenizer = load_tokenizer(spec, cfg.trust_remote_code)
    calib_texts, held_texts, disjoint = split_held_out(read_texts(files, tokenizer), cfg.samples)
    calib, held = tokenize(tokenizer, calib_texts, cfg.max_length), tokenize(tokenizer, held_texts, cfg.max_length)
    group_size, note = fit_group_size(cfg.group_size, layer_widths(spec.base))
    probe = P.encode(tokenizer, P.render(tokenizer, P.default_probe()))

    source = load_model(spec, ctx.platform, ctx.dtype("auto"), trust_remote_code=cfg.trust_remote_code)
    ppl_before, logits_before = perplexity(source, held), P.logits_on(source, probe)
    del source
    if not (math.isfinite(ppl_before) and bool(logits_before.isfinite().all())):
        raise SwiftboxError(f"quantize: the source model {spec.base} gives non-finite outputs (NaN/inf weights?); "
                            "nothing was written")
    gc.collect()

    qconfig = QuantizeConfig(bits=cfg.bits, group_size=group_size, desc_act=cfg.desc_act, sym=cfg.sym,
                             damp_percent=cfg.damp_percent, offload_to_disk=False)
    model = GPTQModel.load(str(spec.base), qconfig, device=ctx.platform.torch_device(0), dtype=torch_dtype(dtype),
                           trust_remote_code=cfg.trust_remote_code)
    t0 = time.time()
    with gptqmodel_log_dir(Path(ctx.work_dir) / "logs"):
        model.quantize(calib, batch_size=cfg.batch_size, tokenizer=tokenizer)
    quantize_seconds = time.time() - t0
    model.save(str(ctx.work_dir), max_shard_size=cfg.max_shard_size)
    del model
    gc.collect()
    ctx.platform.empty_cache()
    tokenizer.save_pretrained(ctx.work_dir)
    if (spec.base / "generation_config.json").is_file():  # gptqmodel rewrites it (e.g. turns sampling on)
        shutil.copyfile(spec.base / "generation_config.json", Path(ctx.work_dir) / "generation_config.json")

    quantized = load_model(resolve_spec(str(ctx.work_dir)), ctx.platform, dtype)  # proves the output loads
    ppl_after = perplexity(quantized, held)
    agreement = P.compare(logits_before, P.logits_on(quantized, probe), probe["attention_mask"])
    del quantized
    if not (math.isfinite(ppl_after) and math.isfinite(agreement["max_abs_diff"])):
        raise SwiftboxError(f"quantize: the {cfg.bits}-bit model gives non-finite outputs (perplexity {ppl_after}); "
                            "nothing was written")

    size, source_size = weight_bytes(ctx.work_dir), weight_bytes(spec.base)
    metrics = {
        "bits": cfg.bits, "group_size": group_size,
        "size_bytes": size, "source_size_bytes": source_size, "size_ratio": size / max(source_size, 1),
        "quantize_seconds": round(quantize_seconds, 3), "seconds": round(time.time() - started, 3),
        "perplexity_before": ppl_before, "perplexity_after": ppl_after, "perplexity_ratio": ppl_after / ppl_before,
        "cosine_mean": agreement["cosine_mean"], "cosine_min": agreement["cosine_min"],
        "argmax_agreement": agreement["argmax_agreement"],
        "calibration_samples": len(calib), "held_out_samples": len(held),
    }
    quantization = {"method": "gptq", "bits": cfg.bits, "group_size": group_size, "desc_act": cfg.desc_act,
                    "sym": cfg.sym, "tool": "gptqmodel", "calibration": [str(f) for f in files],
                    "calibration_source": origin, "held_out_disjoint": disjoint,
                    "loads_with": ["gptqmodel"] + (["transformers"] if transformers_loads_gptq() else [])}
    if note:
        quantization["note"] = note
    return StepResult(metrics=metrics, info={"artifact": "model", "quantization": quantization,
                                             "source_model": str(spec.base), "dtype": dtype})


PIPELINE = declare("quantize", QuantizeStep, produces_model=True, check=check, run=run)
