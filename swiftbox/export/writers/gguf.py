"""`quantize --method gguf`: a GGUF for llama.cpp / Ollama / LM Studio, written by llama.cpp's own tools and
proven by running it in llama.cpp (swiftbox.export.llamacpp), with the quality report every export gives.

Model: convert_hf_to_gguf.py writes f16 / bf16 / q8_0 directly; the k-quants (q6_k, q5_k_m, q4_k_m) are made
from a 16-bit conversion by llama.cpp's quantizer (the per-tensor mixes of *_K_M live only there). With
`adapter_only: true` a PEFT LoRA adapter becomes a GGUF LoRA (convert_lora_to_gguf.py) next to its base as a
GGUF, for `llama-server -m base.gguf --lora adapter.gguf` and Ollama's ADAPTER.

The figures come from llama.cpp itself (the bindings, runner.py) on the token ids transformers gives, so both
sides see the same input: perplexity on the held-out rows (before: the source in torch; after: the GGUF in
llama.cpp), logit cosine and argmax agreement on the parity probe, greedy continuations of the probe prompts,
and llama.cpp's tokenizer against transformers' on every held-out and probe text (must agree exactly). The
tensor table must store every decoder weight in the type asked for. Past a tolerance nothing is written.
Output: <name>-<type>.gguf, Modelfile, swiftbox.json (+ logs/llama.cpp.log).
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftbox import quant_methods
from swiftbox.contract import StepContext, StepResult
from swiftbox.export.checks import ExportPlan
from swiftbox.export.llamacpp.gguf_file import inspect  # noqa: F401  (the export's tensor check, shared with verify)
from swiftbox.steps import QuantizeStep

PROBE_NEW_TOKENS = 16
# The source's side of every comparison computes in float32 whatever the platform's training dtype: llama.cpp
# computes activations in float32 with the GGUF's weights, so only the export's own error is measured (a bf16
# reference alone flips ~5% of the toy's argmaxes against an exact f16 GGUF). A bf16-stored source upcasts exactly.
REFERENCE_DTYPE = "float32"
# documented bounds (docs/export.md), by the bits a type is gated as: the gguf record's (swiftbox/quant_methods.py);
# quantize.tolerance.* overrides any of them
TOLERANCES = quant_methods.GGUF_TOLERANCES
# bits per weight a type may take on disk (whole file / parameters). Rows that do not split into 256-wide blocks
# (hidden 576, 896, ...) make llama.cpp fall back from Q4_K/Q5_K/Q6_K to Q5_0/Q5_1/Q8_0, so a small model's
# q4_k_m is ~6.2 bits and its q6_k ~8.5: the size bound is this over the source's
MAX_BITS_PER_WEIGHT = {"f16": 16.6, "bf16": 16.6, "q8_0": 9.2, "q6_k": 9.2, "q5_k_m": 7.8, "q4_k_m": 7.2}
# tensor type every decoder weight must have (None: any quantized type: k-quants mix Q4_K/Q5_K/Q6_K/Q8_0, ...)
def tolerances(cfg: QuantizeStep) -> dict[str, float]:
    from swiftbox.export import quality

    return quality.tolerances(cfg.bits or 8, cfg.tolerance.model_dump(), cfg.method)


@dataclass
class MeasuredInputs:
    """What both GGUF exports (a whole model here, a LoRA in gguf_adapter.py) measure on: the held-out rows of the
    planned calibration files, the parity probe, the stop tokens, and every text whose tokenization llama.cpp must
    reproduce (held-out + probe) with transformers' ids."""

    tokenizer: Any
    held_texts: list[str]
    held: list[dict]
    disjoint: bool
    texts: list[str]
    probe: list[list[int]]
    stops: set[int]
    check_texts: list[str]
    check_ids: list[list[int]]


def measured_inputs(cfg: QuantizeStep, spec, planned: ExportPlan) -> MeasuredInputs:
    """The one preamble of a GGUF export: tokenizer, held-out rows, probe, stops (the input was checked and its
    calibration files chosen by the step's check: `planned`)."""
    from swiftbox.export.calibration import read_texts, split_held_out, tokenize
    from swiftbox.export.llamacpp.runner import stop_ids
    from swiftbox.modeling.loading import load_tokenizer

    tokenizer = load_tokenizer(spec, cfg.trust_remote_code)
    _calib, held_texts, disjoint = split_held_out(read_texts(list(planned.calibration), tokenizer), cfg.samples)
    texts, probe = probe_rows(tokenizer)
    check_texts = held_texts + texts
    held = tokenize(tokenizer, held_texts, cfg.max_length)
    return MeasuredInputs(tokenizer=tokenizer, held_texts=held_texts, held=held, disjoint=disjoint, texts=texts,
                          probe=probe, stops=stop_ids(tokenizer, spec.base), check_texts=check_texts,
                          check_ids=[tokenizer(t, add_special_tokens=False)["input_ids"] for t in check_texts])


def probe_rows(tokenizer) -> tuple[list[str], list[list[int]]]:
    """The parity probe rendered with the chat template (generation prompt on), and its token ids."""
    from swiftbox import parity as P

    texts = P.render(tokenizer, P.default_probe())
    return texts, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def torch_figures(model, held: list[dict], probe: list[list[int]], stops: set[int]) -> dict:
    """The source's side, in torch: perplexity, per-position logits on each probe row, greedy continuations."""
    import torch

    from swiftbox.export import quality

    device = next(model.parameters()).device
    logits, greedy = [], []
    with torch.no_grad():
        for ids in probe:
            x = torch.tensor([ids], device=device)
            logits.append(model(input_ids=x).logits[0].float().cpu().numpy())
            out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=PROBE_NEW_TOKENS,
                                 do_sample=False, eos_token_id=sorted(stops) or None,
                                 pad_token_id=sorted(stops)[0] if stops else 0)[0, len(ids):].tolist()
            greedy.append(_until(out, stops))
    return {"perplexity": quality.perplexity(model, held), "logits": logits, "greedy": greedy}


def _until(tokens: list[int], stops: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[:i]
    return tokens


def llamacpp_figures(gguf: Path, held: list[dict], probe: list[list[int]], stops: set[int], texts: list[str],
                     want_ids: list[list[int]], lora: Path | None = None) -> dict:
    """The same figures from llama.cpp, plus how many texts its tokenizer encodes exactly as transformers does."""
    from swiftbox.export.llamacpp import runner

    longest = max([len(r["input_ids"]) for r in held] + [len(p) + PROBE_NEW_TOKENS for p in probe] + [64])
    with runner.load(gguf, n_ctx=min(longest + 8, 8192), lora=lora) as model:
        same = sum(model.tokenize(t) == ids for t, ids in zip(texts, want_ids))
        first_diff = next((t for t, ids in zip(texts, want_ids) if model.tokenize(t) != ids), None)
        return {"perplexity": model.perplexity(held), "logits": [model.logits(ids) for ids in probe],
                "greedy": [model.greedy(ids, PROBE_NEW_TOKENS, stops) for ids in probe],
                "tokenizer_agreement": same / max(len(texts), 1), "tokenizer_first_diff": first_diff,
                "n_vocab": model.n_vocab}


def compare(before: dict, after: dict) -> dict:
    """cosine (mean, min) and argmax agreement over every probe position; whole greedy continuations equal."""
    import numpy as np

    a = np.concatenate(before["logits"]).astype(np.float64)
    b = np.concatenate(after["logits"]).astype(np.float64)
    if a.shape != b.shape:
        return {"cosine_mean": float("nan"), "cosine_min": float("nan"), "argmax_agreement": float("nan"),
                "greedy_agreement": float("nan")}
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)
    greedy = [x == y for x, y in zip(before["greedy"], after["greedy"])]
    return {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
            "argmax_agreement": float((a.argmax(1) == b.argmax(1)).mean()),
            "greedy_agreement": sum(greedy) / max(len(greedy), 1)}


def gate(metrics: dict, inspection: dict, tol: dict[str, float]) -> list[str]:
    """The bounds the export breaks, one phrase each (empty: it passes). NaN never passes."""
    from swiftbox.export import quality

    broken = quality.gate(metrics, inspection, tol)
    checks = [("greedy_agreement", "min_greedy_agreement")]
    for figure, bound in checks:
        value = metrics.get(figure)
        if value is not None and bound in tol and not value >= tol[bound]:
            broken.append(f"{figure} {value:.4g} (needs >= {tol[bound]:g})")
    if metrics.get("tokenizer_agreement") is not None and not metrics["tokenizer_agreement"] >= 1.0:
        broken.append(f"llama.cpp tokenizes {1 - metrics['tokenizer_agreement']:.0%} of the texts differently from "
                      f"transformers (e.g. {metrics.get('tokenizer_first_diff', '')[:60]!r})")
    return broken


def _source_bits_per_weight(source_bytes: int, n_params: int) -> float:
    return source_bytes * 8 / max(n_params, 1)


def _params(info) -> int:
    import math

    return sum(math.prod(shape) for shape in info.tensor_shapes.values())


def file_stem(ref: str) -> str:
    """The model's name for the file: the reference's last part ("toy", "Qwen2.5-0.5B-Instruct", a folder name)."""
    import re

    name = Path(str(ref)).name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def run(cfg: QuantizeStep, ctx: StepContext) -> StepResult:
    """The full model checked by the step's check (ctx.plan; gguf_adapter.check) -> GGUF, measured and gated in
    llama.cpp (an adapter alone: gguf_adapter.run_adapter)."""
    from swiftbox.export import quality
    from swiftbox.export.llamacpp import convert, gguf_file
    from swiftbox.modeling.loading import load_model

    started = time.time()
    planned = ctx.plan_as(ExportPlan)
    spec = planned.source
    inputs = measured_inputs(cfg, spec, planned)
    tokenizer, held, probe, stops = inputs.tokenizer, inputs.held, inputs.probe, inputs.stops

    t_source = time.time()
    source = load_model(spec, ctx.platform, REFERENCE_DTYPE, trust_remote_code=cfg.trust_remote_code)
    before = torch_figures(source, held, probe, stops)
    del source
    gc.collect()
    source_seconds = time.time() - t_source

    work = Path(ctx.work_dir)
    gguf_type = cfg.type or "q8_0"
    out = work / f"{file_stem(ctx.input)}-{gguf_type}.gguf"
    log = work / "logs" / "llama.cpp.log"
    from swiftbox.export.llamacpp import TYPES

    t0 = time.time()
    direct = TYPES[gguf_type][2]
    if direct:
        convert.convert_model(spec.base, out, direct, log)
    else:
        wide = work / "convert-16bit.gguf.tmp"
        convert.convert_model(spec.base, wide, "auto", log)
        convert.quantize_file(wide, out, gguf_type, log)
        wide.unlink()
    quantize_seconds = time.time() - t0

    info = gguf_file.read(out)
    inspection = inspect(info, gguf_type)
    metrics: dict = {"method": "gguf", "type": gguf_type, "bits": cfg.bits}
    measured = {}
    if not inspection["error"]:
        t_llama = time.time()
        after = llamacpp_figures(out, held, probe, stops, inputs.check_texts, inputs.check_ids)
        llamacpp_seconds = time.time() - t_llama
        measured = after
        size, source_size = out.stat().st_size, quality.weight_bytes(spec.base)
        n_params = _params(info)
        bpw = size * 8 / max(n_params, 1)
        metrics.update({
            "size_bytes": size, "source_size_bytes": source_size, "size_ratio": size / max(source_size, 1),
            "bits_per_weight": round(bpw, 3), "parameters": n_params,
            "quantize_seconds": round(quantize_seconds, 3), "source_seconds": round(source_seconds, 3),
            "llamacpp_seconds": round(llamacpp_seconds, 3), "seconds": round(time.time() - started, 3),
            "perplexity_before": before["perplexity"], "perplexity_after": after["perplexity"],
            "perplexity_ratio": after["perplexity"] / before["perplexity"],
            **compare(before, after),
            "tokenizer_agreement": after["tokenizer_agreement"],
            "quantized_modules": inspection["quantized_modules"], "linear_modules": inspection["linear_modules"],
            "held_out_samples": len(held), "probe_prompts": len(probe),
        })
    tol = tolerances(cfg)
    if "size_ratio" in metrics:
        tol.setdefault("max_size_ratio", MAX_BITS_PER_WEIGHT[gguf_type] /
                       _source_bits_per_weight(metrics["source_size_bytes"], metrics["parameters"]))
    else:
        tol.setdefault("max_size_ratio", 1.0)
    broken = gate({**metrics, "tokenizer_first_diff": measured.get("tokenizer_first_diff")}, inspection, tol)
    if broken:
        from swiftbox.export.quality import QualityGateFailed

        raise QualityGateFailed(f"quantize: the gguf {gguf_type} export fails its quality gate: {'; '.join(broken)}; "
                                "nothing was written (tolerances: docs/export.md, or set quantize.tolerance.*)")
    from swiftbox.export.llamacpp import modelfile

    mf, template_facts = modelfile.build(out.name, tokenizer, spec.base, adds_bos=info.adds_bos)
    (work / "Modelfile").write_text(mf.text(), encoding="utf-8")
    quantization = {"method": "gguf", "type": gguf_type, "bits": cfg.bits, "file": out.name,
                    **_tool_facts(), "architecture": info.architecture, "tensor_types": info.type_counts,
                    "tolerances": tol, "held_out": [str(f) for f in planned.calibration],
                    "held_out_source": planned.calibration_source, "held_out_disjoint": inputs.disjoint,
                    "modelfile": template_facts,
                    "loads_with": quant_methods.get(cfg.method).loaders()}
    return StepResult(metrics=metrics, info={"artifact": "gguf", "quantization": quantization,
                                             "source_model": str(spec.base)})


def _tool_facts() -> dict:
    from swiftbox.export.llamacpp import LLAMA_CPP_VERSION
    from swiftbox.export.llamacpp.convert import ensure_tree

    return {"tool": "llama.cpp (convert_hf_to_gguf.py, llama_model_quantize)",
            "llama_cpp_python": LLAMA_CPP_VERSION, "converter_tree": str(ensure_tree())}
