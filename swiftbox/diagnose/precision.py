"""`./launch.sh precision A B`: the layer-by-layer forward compare of two sides.

A side is a model reference (toy, a directory, an artifact, a hub id) plus a device and dtype:
`toy@cpu:float32`, `runs/q/merge@npu:bfloat16`, or a bare reference (the default device, dtype auto).
The same probe token ids (rendered with side A's tokenizer) go through both sides; forward hooks on every
module record its output, and the report lists, in execution order, each module call's cosine similarity,
max absolute error and max relative error (max |a - b| / max |a|) over the non-padding positions. The first
module below the thresholds is flagged: the first culprit, whose inputs still matched, not the last symptom.
`--grads` also compares the parameter gradients of one training step (loss on the probe), listed in backward
order. Output: precision.json, precision.csv and precision.png (similarity by module) under --out.

Exit 0: every module within the thresholds; 1: a module below them; 2: bad input.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from swiftbox.errors import UserError

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16", "auto": "auto"}
PEFT_PREFIX = "base_model.model."


@dataclass
class Side:
    ref: str
    device: Optional[str] = None
    dtype: str = "auto"

    def __str__(self) -> str:
        return f"{self.ref}@{self.device or 'auto'}:{self.dtype}"


def parse_side(text: str) -> Side:
    """`REF[@DEVICE[:DTYPE]]`; REF may itself hold ':' (hf:ORG/NAME), so only the part after the last '@' is
    device and dtype."""
    if not text or not text.strip():
        raise UserError("precision: empty side; expected REF[@DEVICE[:DTYPE]], e.g. toy@cpu:bfloat16")
    ref, at, where = text.rpartition("@")
    if not at:
        return Side(text)
    device, _, dtype = where.partition(":")
    if dtype and dtype not in DTYPES:
        raise UserError(f"precision: side {text!r}: unknown dtype {dtype!r}; expected one of "
                        f"{', '.join(sorted(set(DTYPES.values())))}")
    from swiftbox.device import DEVICE_CHOICES

    if device and device not in DEVICE_CHOICES:
        raise UserError(f"precision: side {text!r}: unknown device {device!r}; expected one of "
                        f"{', '.join(DEVICE_CHOICES)}")
    return Side(ref, device or None, DTYPES[dtype] if dtype else "auto")


def _first_tensor(value):
    import torch

    if torch.is_tensor(value):
        return value if value.is_floating_point() else None
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _kept(tensor, mask):
    """float32 CPU copy; [batch, seq, ...] outputs keep only the non-padding positions."""
    t = tensor.detach().float().cpu()
    if t.dim() >= 2 and tuple(t.shape[:2]) == tuple(mask.shape):
        t = t[mask.bool()]
    return t


def capture(model, batch, grads: bool = False) -> tuple[list[str], dict, dict]:
    """Run `batch` through `model` with a hook on every module: (call order, outputs, parameter gradients)."""
    import torch

    order: list[str] = []
    outputs: dict = {}
    counts: dict[str, int] = {}
    mask = batch["attention_mask"]

    def hook(name):
        def record(module, args, output):
            tensor = _first_tensor(output)
            if tensor is None:
                return
            counts[name] = counts.get(name, 0) + 1
            key = name if counts[name] == 1 else f"{name}#{counts[name]}"
            order.append(key)
            outputs[key] = _kept(tensor, mask)
        return record

    handles = [m.register_forward_hook(hook(_normal(n))) for n, m in model.named_modules()
               if not _peft_internal(n)]
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    gradients: dict = {}
    try:
        if grads:
            labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
            model.zero_grad(set_to_none=True)
            model(**inputs, labels=labels, use_cache=False).loss.backward()
            for name, param in model.named_parameters():
                if param.grad is not None:
                    gradients[_normal(name)] = param.grad.detach().float().cpu()
            model.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                model(**inputs, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return order, outputs, gradients


def _normal(name: str) -> str:
    name = name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name
    return name.replace(".base_layer", "") or "(model)"


def _peft_internal(name: str) -> bool:
    parts = name.split(".")
    return any(p in ("lora_A", "lora_B", "lora_dropout", "lora_embedding_A", "lora_embedding_B",
                     "lora_magnitude_vector", "base_layer") for p in parts) or name == "base_model"


def metrics(a, b) -> dict:
    import torch

    if a.shape != b.shape:
        return {"cosine": float("nan"), "max_abs_err": float("nan"), "max_rel_err": float("nan"),
                "note": f"shape {tuple(a.shape)} vs {tuple(b.shape)}"}
    va, vb = a.reshape(-1).double(), b.reshape(-1).double()
    if not torch.isfinite(vb).all() or not torch.isfinite(va).all():
        return {"cosine": float("nan"), "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "note": "non-finite values"}
    na, nb = va.norm(), vb.norm()
    if na == 0 and nb == 0:
        cosine = 1.0
    elif na == 0 or nb == 0:
        cosine = 0.0
    else:
        cosine = float(torch.dot(va, vb) / (na * nb))
    err = (va - vb).abs().max().item() if va.numel() else 0.0
    scale = va.abs().max().item() if va.numel() else 0.0
    rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    return {"cosine": cosine, "max_abs_err": err, "max_rel_err": rel}


def below(row: dict, min_cosine: float, max_rel: Optional[float]) -> bool:
    cos = row["cosine"]
    if cos != cos or cos < min_cosine:  # NaN counts as below
        return True
    return max_rel is not None and not row["max_rel_err"] <= max_rel


def _load(side: Side, trust_remote_code: bool):
    from swiftbox.device import resolve_platform
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec

    platform = resolve_platform(side.device)
    dtype = platform.resolve_dtype(side.dtype)
    spec = resolve_spec(side.ref)
    model = load_model(spec, platform, dtype, trust_remote_code=trust_remote_code)
    return model, load_tokenizer(spec, trust_remote_code), f"{side.ref}@{platform.name}:{dtype}"


def precision(a: str, b: str, *, probe=None, prompts: int = 4, max_length: int = 64, min_cosine: float = 0.99,
              max_rel: Optional[float] = None, grads: bool = False, trust_remote_code: bool = False) -> dict:
    """Compare sides `a` and `b` module by module; returns the report (rows in execution order)."""
    from swiftbox.modeling.loading import resolve_spec
    from swiftbox.parity import default_probe, encode, read_probe, render

    side_a, side_b = parse_side(a), parse_side(b)
    resolve_spec(side_b.ref)   # a bad side B fails before side A is loaded
    items = read_probe(probe)[:prompts] if probe else default_probe(max(prompts, 1))[:prompts]
    model_a, tok, label_a = _load(side_a, trust_remote_code)
    batch = encode(tok, render(tok, items), max_length)
    order, out_a, grad_a = capture(model_a, batch, grads)
    del model_a
    model_b, _, label_b = _load(side_b, trust_remote_code)
    _, out_b, grad_b = capture(model_b, batch, grads)
    del model_b

    rows = []
    for i, key in enumerate(order):
        if key not in out_b:
            continue
        row = {"index": i, "module": key, "shape": list(out_a[key].shape), **metrics(out_a[key], out_b[key])}
        row["below"] = below(row, min_cosine, max_rel)
        rows.append(row)
    first = next((r["module"] for r in rows if r["below"]), None)
    report = {"a": label_a, "b": label_b, "prompts": len(items), "positions": int(batch["attention_mask"].sum()),
              "thresholds": {"min_cosine": min_cosine, "max_rel_err": max_rel}, "first_culprit": first,
              "modules_compared": len(rows), "modules_only_in_a": sum(1 for k in order if k not in out_b),
              "rows": rows}
    if grads:
        grad_rows = []
        for name in reversed(list(grad_a)):   # backward order: the last parameters get their gradients first
            if name in grad_b:
                row = {"parameter": name, **metrics(grad_a[name], grad_b[name])}
                row["below"] = below(row, min_cosine, max_rel)
                grad_rows.append(row)
        report["gradients"] = grad_rows
        report["first_gradient_culprit"] = next((r["parameter"] for r in grad_rows if r["below"]), None)
    return report


def write_outputs(report: dict, out: Path) -> None:
    from swiftbox.artifacts import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "precision.json", report)
    tmp = out / ".precision.csv.partial"
    with open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["index", "module", "cosine", "max_abs_err", "max_rel_err", "below", "shape"])
        for r in report["rows"]:
            writer.writerow([r["index"], r["module"], r["cosine"], r["max_abs_err"], r["max_rel_err"], r["below"],
                             "x".join(map(str, r["shape"]))])
    tmp.replace(out / "precision.csv")
    plot(report, out / "precision.png")


def plot(report: dict, file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot([r["index"] for r in rows], [r["cosine"] for r in rows], marker=".", linewidth=1)
    ax.axhline(report["thresholds"]["min_cosine"], color="red", linestyle="--", linewidth=1, label="min cosine")
    culprit = next((r for r in rows if r["below"]), None)
    if culprit:
        ax.axvline(culprit["index"], color="orange", linewidth=1, label=f"first culprit: {culprit['module']}")
    ax.set_xlabel("module call (execution order)")
    ax.set_ylabel("cosine similarity")
    ax.set_title(f"precision: {report['a']} vs {report['b']}")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(file, dpi=100)
    plt.close(fig)


def print_report(report: dict, out: Path, rows_shown: int = 12) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = report["rows"]
    first = report["first_culprit"]
    if first:
        at = next(i for i, r in enumerate(rows) if r["module"] == first)
        shown = rows[max(0, at - 3): at + rows_shown - 3]
    else:
        shown = sorted(rows, key=lambda r: r["cosine"])[:rows_shown]
    table = Table(title=f"precision  A={report['a']}  B={report['b']}  ({report['prompts']} prompts, "
                        f"{report['positions']} positions, {report['modules_compared']} module calls)")
    for col in ("#", "module", "cosine", "max abs err", "max rel err", ""):
        table.add_column(col, justify="right" if col not in ("module", "") else "left")
    for r in shown:
        mark = "[red]FIRST CULPRIT[/]" if r["module"] == first else ("[red]below[/]" if r["below"] else "")
        table.add_row(str(r["index"]), r["module"], f"{r['cosine']:.6f}", f"{r['max_abs_err']:.3g}",
                      f"{r['max_rel_err']:.3g}", mark)
    console = Console()
    console.print(table)
    console.print(f"first module below the thresholds: {first or 'none'}")
    if "gradients" in report:
        first_grad = report["first_gradient_culprit"] or "none"
        console.print(f"first gradient below the thresholds (backward order): {first_grad}")
    console.print(f"report: {out}/precision.json, precision.csv, precision.png")


def precision_cli(a: Optional[str], b: Optional[str], extra_args: Sequence[str]) -> int:
    """`./launch.sh precision A B [--a A --b B] [--probe F] [--min-cosine X] [--max-rel X] [--grads] [--out D]`."""
    from swiftbox.args import OneLineParser

    parser = OneLineParser(prog="swiftbox precision")
    parser.add_argument("pos_a", nargs="?", default=None, metavar="A", help="side A: REF[@DEVICE[:DTYPE]]")
    parser.add_argument("pos_b", nargs="?", default=None, metavar="B", help="side B")
    parser.add_argument("--a", dest="side_a", default=None, help="side A: REF[@DEVICE[:DTYPE]]")
    parser.add_argument("--b", dest="side_b", default=None, help="side B: REF[@DEVICE[:DTYPE]]")
    parser.add_argument("--probe", default=None, help="prompts: .txt (one a line) or .jsonl; default: built-in")
    parser.add_argument("--prompts", type=int, default=4, help="how many probe prompts (default 4)")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per prompt (default 64)")
    parser.add_argument("--min-cosine", type=float, default=0.99, help="flag a module below this cosine (0.99)")
    parser.add_argument("--max-rel", type=float, default=None, help="also flag max relative error above this")
    parser.add_argument("--grads", action="store_true", help="also compare gradients of one training step")
    parser.add_argument("--out", default=None, help="report directory (default runs/precision/<time>)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    parser.add_argument("--trust-remote-code", action="store_true")
    args = parser.parse_args([x for x in extra_args if x != "--"])
    side_a, side_b = args.side_a or args.pos_a or a, args.side_b or args.pos_b or b
    if not side_a or not side_b:
        raise UserError("precision: two sides are needed: precision A B (or --a A --b B), each REF[@DEVICE[:DTYPE]]")
    if args.prompts < 1 or args.max_length < 2 or not 0 < args.min_cosine <= 1:
        raise UserError("precision: --prompts >= 1, --max-length >= 2 and 0 < --min-cosine <= 1 are expected")
    report = precision(side_a, side_b, probe=args.probe, prompts=args.prompts, max_length=args.max_length,
                       min_cosine=args.min_cosine, max_rel=args.max_rel, grads=args.grads,
                       trust_remote_code=args.trust_remote_code)
    out = Path(args.out or Path("runs") / "precision" / datetime.now().strftime("%Y%m%d-%H%M%S"))
    write_outputs(report, out)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k not in ("rows", "gradients")} | {"out": str(out)}))
    else:
        print_report(report, out)
    bad = report["first_culprit"] or report.get("first_gradient_culprit")
    print(f"precision: {'FAIL' if bad else 'ok'}", file=sys.stderr)
    return 1 if bad else 0
