"""Logit parity between two models on a probe set: the proof that an export kept the outputs.

    import swiftbox as sb
    sb.parity("runs/quickstart/dpo", "runs/quickstart/merge")          # adapter vs merged
    ./launch.sh parity runs/q/merge runs/q/quantize --min-cosine 0.99   # fp vs GPTQ, exit 1 below
    ./launch.sh parity runs/q/dpo runs/q/merge --same-model              # exit 1 past the dtype's tolerance

Both models see the same token ids (the tokenizer of `a`), in float32 logits; per probe position we
take the cosine similarity of the two logit vectors and |a - b|. The merge step uses the same
functions to verify a merge before its output is committed.

Like with like (swiftbox/device/dtype_policy.py): both sides compute in ONE dtype - float32 unless `--dtype` says
otherwise or a side is a 16-bit-kernel export (GPTQ/AWQ/FP8; then both run in that kernel's dtype) - and the result
carries `relative_diff` (max |Δlogit| / max(1, max |logit|)) and `tolerance`, the relative difference that dtype's
rounding allows between two equal models (`same_model`: within it).
"""
from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path
from typing import Optional, Sequence, Union

from swiftbox.errors import UserError

PROBE_SEED = 1234


def default_probe(n: int = 16) -> list[list[dict]]:
    """A fixed probe: chat questions of the toy task plus a few general prompts (deterministic)."""
    rng = random.Random(PROBE_SEED)
    convs = []
    for i in range(n - 4):
        number = rng.randrange(10, 99999)
        kind = "even" if i % 2 == 0 else "odd"
        convs.append([{"role": "user", "content": f"Is {number} {kind}?"}])
    for text in ("Hello! How can I help you today?", "What is a low-rank adapter?",
                 "Name three rivers and three mountains.", "Please answer with yes or no: is the sky green?"):
        convs.append([{"role": "user", "content": text}])
    return convs[:n]


def read_probe(path: Union[str, Path]) -> list:
    """Probe prompts from a file: .txt (one prompt a line) or .jsonl/.json rows with `messages`, `prompt`,
    `query`, `instruction` or `text`. Returns strings or message lists (assistant turns dropped)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"probe {file}: no such file; expected a .txt (one prompt a line) or .jsonl file")
    text = file.read_text(encoding="utf-8", errors="replace")
    if file.suffix == ".txt":
        items: list = [line for line in text.splitlines() if line.strip()]
    else:
        try:
            lines = [line for line in text.splitlines() if line.strip()]
            rows = json.loads(text) if file.suffix == ".json" else [json.loads(line) for line in lines]
        except json.JSONDecodeError as exc:
            raise UserError(f"probe {file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        items = [p for p in (_prompt_of(r) for r in rows if isinstance(r, dict)) if p]
    if not items:
        raise UserError(f"probe {file}: holds no prompts (expected messages, prompt, query, instruction or text)")
    return items


def _prompt_of(row: dict):
    if isinstance(row.get("messages"), list):
        msgs = [m for m in row["messages"] if isinstance(m, dict) and m.get("role") != "assistant"]
        return msgs or None
    for key in ("prompt", "query", "instruction", "text"):
        if isinstance(row.get(key), str) and row[key].strip():
            return row[key]
    return None


def render(tokenizer, items: Sequence) -> list[str]:
    """Chat-format message lists with the tokenizer's template; plain strings pass through."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif getattr(tokenizer, "chat_template", None):
            out.append(tokenizer.apply_chat_template(list(item), tokenize=False, add_generation_prompt=True))
        else:
            out.append("\n".join(m.get("content", "") for m in item))
    return out


def encode(tokenizer, texts: Sequence[str], max_length: int = 256):
    """Right-padded batch (input_ids, attention_mask) on the CPU."""
    side = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        return tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True, max_length=max_length,
                         add_special_tokens=False)
    finally:
        tokenizer.padding_side = side


def logits_on(model, batch, chunk: int = 8):
    """float32 logits of `model` on `batch`, computed in chunks, returned on the CPU."""
    import torch

    device = next(model.parameters()).device
    outs = []
    with torch.no_grad():
        for start in range(0, batch["input_ids"].shape[0], chunk):
            part = {k: v[start:start + chunk].to(device) for k, v in batch.items()
                    if k in ("input_ids", "attention_mask")}
            outs.append(model(**part).logits.float().cpu())
    return torch.cat(outs)


def round_weights(model, dtype: str) -> None:
    """Round `model`'s parameters to `dtype` in place, keeping their own dtype: the weights as a file saved in `dtype`
    holds them. Buffers (rotary frequencies, recomputed at load) are left alone, as loading leaves them."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(getattr(torch, dtype)))


def compare(a, b, mask) -> dict:
    """Cosine similarity and |Δ| between two logit tensors [batch, seq, vocab] at unmasked positions."""
    import torch

    keep = mask.bool()
    va, vb = a[keep], b[keep]
    if va.shape != vb.shape:
        raise UserError(f"parity: the models disagree on vocabulary size ({a.shape[-1]} vs {b.shape[-1]})")
    cos = torch.nn.functional.cosine_similarity(va.double(), vb.double(), dim=-1)
    diff = (va - vb).abs()
    return {
        "positions": int(va.shape[0]),
        "cosine_min": float(cos.min()),
        "cosine_mean": float(cos.mean()),
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "argmax_agreement": float((va.argmax(-1) == vb.argmax(-1)).double().mean()),
    }


def _load(spec, platform, dtype: str, trust_remote_code: bool):
    from swiftbox.modeling.loading import load_model, load_tokenizer

    model = load_model(spec, platform, dtype, trust_remote_code=trust_remote_code)
    return model, load_tokenizer(spec, trust_remote_code)


def same_model_figures(logits_a, result: dict, dtype: str) -> dict:
    """`relative_diff`, the dtype's `tolerance` for it and whether the two sides are the same model within it."""
    import math

    from swiftbox.device.dtype_policy import relative_tolerance

    scale = max(1.0, float(logits_a.abs().max()))
    relative = result["max_abs_diff"] / scale if math.isfinite(scale) else float("nan")
    tolerance = relative_tolerance(dtype)
    return {"relative_diff": relative, "tolerance": tolerance, "same_model": bool(relative <= tolerance)}


def parity(a: str, b: str, probe: Union[None, str, Path, Sequence] = None, *, device: Optional[str] = None,
           dtype: str = "auto", max_length: int = 256, trust_remote_code: bool = False) -> dict:
    """Compare the logits of model references `a` and `b` on `probe` (a file, a list of prompts or
    message lists, or None for the built-in probe). Returns the figures of `compare` plus the refs."""
    from swiftbox.device import current_platform, dtype_policy
    from swiftbox.modeling.loading import resolve_spec

    platform = current_platform(device)
    spec_a, spec_b = resolve_spec(a), resolve_spec(b)
    dt = dtype_policy.same_model_check(platform, dtype, (spec_a.quantized, spec_b.quantized))
    items = default_probe() if probe is None else (read_probe(probe) if isinstance(probe, (str, Path)) else list(probe))
    if not items:
        raise UserError("parity: the probe set is empty")
    model_a, tok = _load(spec_a, platform, dt, trust_remote_code)
    batch = encode(tok, render(tok, items), max_length)
    logits_a = logits_on(model_a, batch)
    del model_a
    model_b, _ = _load(spec_b, platform, dt, trust_remote_code)
    logits_b = logits_on(model_b, batch)
    result = compare(logits_a, logits_b, batch["attention_mask"])
    result.update(same_model_figures(logits_a, result, dt))
    return {"a": a, "b": b, "prompts": len(items), "dtype": dt, "device": platform.name, **result}


def check(result: dict, max_diff: Optional[float] = None, min_cosine: Optional[float] = None,
          same_model: bool = False) -> list[str]:
    """The thresholds `result` breaks, as lines (empty = within bounds). `same_model`: also the dtype's own
    tolerance on relative_diff (dtype_policy.relative_tolerance)."""
    broken = []
    if same_model and not result["same_model"]:
        broken.append(f"relative_diff {result['relative_diff']:.4g} > {result['tolerance']:g} (the same-model "
                      f"tolerance in {result['dtype']})")
    if max_diff is not None and not result["max_abs_diff"] <= max_diff:      # NaN-safe: NaN breaks the bound
        broken.append(f"max |Δlogit| {result['max_abs_diff']:.4g} > {max_diff:g}")
    if min_cosine is not None and not result["cosine_min"] >= min_cosine:
        broken.append(f"min cosine {result['cosine_min']:.6f} < {min_cosine:g}")
    return broken


def print_table(result: dict, broken: list[str]) -> None:
    from rich.table import Table

    from swiftbox.tables import console

    table = Table(title=f"parity on {result['prompts']} prompts ({result['positions']} positions, "
                        f"{result['dtype']}, {result['device']})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("a", str(result["a"]))
    table.add_row("b", str(result["b"]))
    for key in ("cosine_min", "cosine_mean", "max_abs_diff", "mean_abs_diff", "argmax_agreement", "relative_diff"):
        table.add_row(key, f"{result[key]:.6g}")
    table.add_row("same model", f"{'yes' if result['same_model'] else 'no'} (relative_diff <= {result['tolerance']:g} "
                                f"in {result['dtype']})")
    table.add_row("verdict", "FAIL: " + "; ".join(broken) if broken else "ok")
    console().print(table)


def parity_cli(a: str, b: str, extra_args: Sequence[str]) -> int:
    """`./launch.sh parity A B [--probe FILE] [--max-diff X] [--min-cosine Y] [--json]`; 1 past a threshold."""
    from swiftbox.args import OneLineParser
    from swiftbox.device import DEVICE_CHOICES
    from swiftbox.steps import DTYPE_NAMES

    parser = OneLineParser(prog="swiftbox parity")
    parser.add_argument("--probe", default=None, help="prompts: .txt (one a line) or .jsonl; default: built-in")
    parser.add_argument("--max-diff", type=float, default=None, help="fail (exit 1) when max |Δlogit| exceeds this")
    parser.add_argument("--min-cosine", type=float, default=None, help="fail (exit 1) when a position's cosine is "
                                                                       "below")
    parser.add_argument("--same-model", action="store_true", help="fail (exit 1) unless the two are the same model "
                        "within the dtype's tolerance (relative |Δlogit| 1e-4 in float32, 5e-2 in 16-bit)")
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPE_NAMES],
                        help="both sides compute in it; auto: float32 (a GPTQ/AWQ/FP8 side: its kernel dtype)")
    parser.add_argument("--device", default=None, help=" | ".join(DEVICE_CHOICES))
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    args = parser.parse_args([x for x in extra_args if x != "--"])
    result = parity(a, b, args.probe, device=args.device, dtype=args.dtype, max_length=args.max_length,
                    trust_remote_code=args.trust_remote_code)
    broken = check(result, args.max_diff, args.min_cosine, args.same_model)
    if args.json:
        print(json.dumps({**result, "ok": not broken, "broken": broken}))
    else:
        print_table(result, broken)
    return 1 if broken else 0


__all__ = ["parity", "parity_cli", "compare", "default_probe", "read_probe", "render", "encode", "logits_on", "check",
           "round_weights"]


class _CallableModule(types.ModuleType):
    """`swiftbox.parity` is both this module and the function: once the module is imported it shadows the
    lazy `swiftbox.parity` attribute, so the module itself answers `sb.parity(a, b)`."""

    def __call__(self, *args, **kwargs):
        return parity(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
