"""verify, section "parity": the chain base+adapter -> merged -> quantized -> served, link by link.

The chain is read from the manifests (a quantize output names its merged input, a merge output names its
adapter); `--against` puts a base model or adapter at its head. Every model sees the same token ids (the
head's tokenizer) and each link reports max |Δlogit|, argmax agreement and greedy-answer agreement, gated
by the link's type. The last link asks the engine itself over HTTP (OpenAI API, temperature 0).

Like with like (swiftbox/device/dtype_policy.py): both sides of a link compute in ONE dtype - float32 for links that
should be exact (base+adapter -> merged), the export's kernel dtype where a side is GPTQ/AWQ/FP8 (a node in two such
links is measured twice) - and a merge link's tolerance is that dtype's, or the merged model's save dtype's where
that is coarser. The served link runs the engine in the dtype the last node's local answers were computed in.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from swiftbox.artifacts import is_adapter_dir, read_manifest
from swiftbox.verify.report import Report

MAX_NEW_TOKENS = 8
# link type -> thresholds: relative max |Δlogit| (/ max(1, max |logit|)), argmax agreement, greedy agreement. The
# merge links' max_relative_diff comes from the one dtype policy (dtype_policy.relative_tolerance of the link's dtype).
LINK_LIMITS: dict[str, dict[str, float]] = {
    "merge": {"min_argmax": 0.99, "min_greedy": 0.9},
    "merge16": {"min_argmax": 0.95, "min_greedy": 0.75},
    # whole 8-token greedy answers after 4-bit: reported, not gated - one flipped near-tie changes the rest of the
    # answer (the GPTQ toy export agrees on 0.85 of probe positions but on 0.25 of whole answers)
    "quantize4": {"min_cosine": 0.95, "min_argmax": 0.65},
    "quantize8": {"min_cosine": 0.99, "min_argmax": 0.9, "min_greedy": 0.75},
    "serve": {"min_greedy": 0.9},
    "fine-tune": {},  # base -> a fine-tuned model: outputs are meant to differ; reported, not gated
}


@dataclass
class Node:
    label: str          # base | base+adapter | merged | quantized | model
    ref: str
    bits: int | None = None
    quantized: str | None = None                             # the export's quant_method, once resolved
    logits: dict[str, Any] = field(default_factory=dict)     # dtype -> logits on the head's token ids
    answers: dict[str, list[str]] = field(default_factory=dict)   # dtype -> greedy answers
    ids_match_head: bool = True


def build_chain(artifact: str, against: str | None) -> list[Node]:
    """Nodes from the head to `artifact`, following `input` of quantize/merge manifests."""
    nodes: list[Node] = []
    ref: str | None = artifact
    while ref:
        manifest = (read_manifest(ref) if Path(ref).is_dir() else None) or {}
        kind = manifest.get("kind")
        if kind == "quantize":
            nodes.insert(0, Node("quantized", ref, bits=(manifest.get("quantization") or {}).get("bits")))
        elif kind == "merge":
            nodes.insert(0, Node("merged", ref))
        else:
            nodes.insert(0, Node("base+adapter" if Path(ref).is_dir() and is_adapter_dir(ref) else "model", ref))
            break
        upstream = manifest.get("input")
        ref = upstream if upstream and Path(upstream).exists() else None
    if against and not any(Path(n.ref).resolve() == Path(against).resolve() for n in nodes if Path(against).exists()):
        nodes.insert(0, Node("base+adapter" if Path(against).is_dir() and is_adapter_dir(against) else "base", against))
    return nodes


def link_type(a: Node, b: Node, tolerance_dtype: str) -> str:
    if b.label == "quantized":
        return f"quantize{8 if (b.bits or 4) >= 8 else 4}"
    if a.label == "base":
        return "fine-tune"
    return "merge" if tolerance_dtype == "float32" else "merge16"


def link_dtype(a: Node, b: Node, platform, requested: str) -> str:
    """The ONE dtype both sides of a link run in (dtype_policy.same_model_check): float32 for links that should be
    exact, the export's kernel dtype where a side is a 16-bit-kernel export; `requested` when the user set one."""
    from swiftbox.device import dtype_policy

    return dtype_policy.same_model_check(platform, requested, (a.quantized, b.quantized))


def stored_dtype(node: Node) -> str | None:
    from swiftbox.device import dtype_policy

    return dtype_policy.source_dtype(node.ref) if Path(node.ref).is_dir() else None


def link_keys(a: Node, b: Node, platform, requested: str) -> tuple[str, str]:
    """Which measurement of each side a link compares. base+adapter -> a merged model saved in a coarser dtype (a bf16
    source stays bf16): base+adapter merged in float32 and rounded to that dtype, computed in float32 - the merged
    model as it should be on disk - so the link is exact, like with like, and the rounding is reported apart."""
    dt = link_dtype(a, b, platform, requested)
    stored = stored_dtype(b)
    if a.label == "base+adapter" and b.label == "merged" and dt == "float32" and stored not in (None, "float32"):
        return f"{dt}>{stored}", dt
    return dt, dt


def tolerance_dtype(b: Node, check: str, exact: bool) -> str:
    """What a link's tolerance is scaled for: its compute dtype, or - where the link does not model it - the dtype `b`
    was saved in when that is coarser."""
    from swiftbox.device import dtype_policy

    return check if exact else dtype_policy.least_precise(check, stored_dtype(b))


def served_dtype(node: Node, platform, requested: str) -> str:
    """The dtype the served link runs the engine in: the last node's own check dtype, so local and served answers
    are computed alike."""
    return link_dtype(node, node, platform, requested)


def plan_dtypes(nodes: list[Node], platform, requested: str) -> list[set[str]]:
    """Per node, the dtypes its links (and the served link, for the last node) need it measured in."""
    from swiftbox.modeling.loading import resolve_spec

    for node in nodes:
        node.quantized = resolve_spec(node.ref).quantized
    need: list[set[str]] = [set() for _ in nodes]
    for i in range(len(nodes) - 1):
        key_a, key_b = link_keys(nodes[i], nodes[i + 1], platform, requested)
        need[i] |= {key_a, key_a.split(">")[0]}   # a rounded measurement is reported against the exact one
        need[i + 1].add(key_b)
    need[-1].add(served_dtype(nodes[-1], platform, requested))
    return need


def measure(nodes: list[Node], platform, requested: str, probe: list) -> None:
    """Logits on the head's token ids and greedy answers, in every dtype a node's links need, one model in memory
    at a time."""
    from swiftbox import parity as P
    from swiftbox.catalog.scoring import generate
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec

    need = plan_dtypes(nodes, platform, requested)
    head_tok = load_tokenizer(resolve_spec(nodes[0].ref))
    batch = P.encode(head_tok, P.render(head_tok, probe))
    for node, dtypes in zip(nodes, need):
        spec = resolve_spec(node.ref)
        tok = load_tokenizer(spec)
        own = P.encode(tok, P.render(tok, probe))
        node.ids_match_head = own["input_ids"].shape == batch["input_ids"].shape and bool(
            (own["input_ids"] == batch["input_ids"]).all())
        for key in sorted(dtypes):
            dt, _, rounded = key.partition(">")
            model = load_model(spec, platform, dt, merge_adapters=bool(rounded))
            if rounded:   # the merged weights as a file in `rounded` holds them, computed in `dt`
                P.round_weights(model, rounded)
            node.logits[key] = P.logits_on(model, batch)
            node.answers[key] = generate(model, tok, probe, MAX_NEW_TOKENS, 1)
            del model
            gc.collect()
    nodes[0].batch_mask = batch["attention_mask"]  # type: ignore[attr-defined]


def agreement(a: list[str], b: list[str]) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(len(a), 1)


def check_links(report: Report, nodes: list[Node], platform, requested: str) -> None:
    import torch

    from swiftbox import parity as P
    from swiftbox.device import dtype_policy

    mask = nodes[0].batch_mask  # type: ignore[attr-defined]
    for node in nodes:
        if not all(bool(torch.isfinite(logits).all()) for logits in node.logits.values()):
            report.add("parity", f"{node.label}: logits finite", False, f"{node.ref} computes NaN or inf logits on the "
                       "probe: every answer would be garbage")
    for a, b in pairwise(nodes):
        name = f"{a.label} -> {b.label}"
        key_a, dt = link_keys(a, b, platform, requested)
        tol_dtype = tolerance_dtype(b, dt, exact=key_a != dt)
        kind = link_type(a, b, tol_dtype)
        if not b.ids_match_head:
            report.add("parity", name, False, f"{b.label} ({b.ref}) has a different tokenizer: the probe encodes to "
                       f"other token ids than {nodes[0].label}'s; copy the right tokenizer files into it")
            continue
        la, lb = a.logits[key_a], b.logits[dt]
        if la.shape[-1] != lb.shape[-1]:
            report.add("parity", name, False, f"vocabulary sizes differ ({la.shape[-1]} vs {lb.shape[-1]})")
            continue
        fig = P.compare(la, lb, mask)
        scale = max(1.0, float(la.abs().max()))
        fig["relative_diff"] = fig["max_abs_diff"] / scale
        fig["greedy_agreement"] = agreement(a.answers[key_a], b.answers[dt])
        limits = dict(LINK_LIMITS[kind])
        if kind.startswith("merge"):
            limits["max_relative_diff"] = dtype_policy.relative_tolerance(tol_dtype)
        ok, text = gate(fig, limits, kind)
        text += f"; both in {dt}" + (f", {tol_dtype} tolerance" if tol_dtype != dt else "")
        if key_a != dt:   # what storing the merge in its dtype costs against base+adapter unrounded (not gated)
            rounding = P.compare(a.logits[dt], lb, mask)["max_abs_diff"] / max(1.0, float(a.logits[dt].abs().max()))
            text += f" (merged in float32 and rounded to {key_a.split('>')[1]} as saved; the rounding itself: " \
                    f"relative {rounding:.3g})"
        report.add("parity", name, ok, text)


def gate(fig: dict, limits: dict, kind: str) -> tuple[bool, str]:
    """(ok, detail) for one link; NaN fails every bound."""
    broken = []
    bounds = [("relative_diff", "<=", "max_relative_diff"), ("cosine_mean", ">=", "min_cosine"),
              ("argmax_agreement", ">=", "min_argmax"), ("greedy_agreement", ">=", "min_greedy")]
    for figure, op, key in bounds:
        if key in limits and figure in fig:
            value, bound = fig[figure], limits[key]
            if not (value <= bound if op == "<=" else value >= bound):
                broken.append(f"{figure} {value:.4g} (needs {op} {bound:g})")
    text = (f"max|Δlogit| {fig.get('max_abs_diff', float('nan')):.3g}, argmax {fig.get('argmax_agreement', 0):.3f}, "
            f"cosine {fig.get('cosine_mean', float('nan')):.5f}, greedy {fig['greedy_agreement']:.2f}"
            if "max_abs_diff" in fig else f"greedy {fig['greedy_agreement']:.2f}")
    if kind == "fine-tune":
        text += " (not gated: fine-tuning changes outputs)"
    return not broken, ("; ".join(broken) + " - " + text) if broken else text


def check_served(report: Report, node: Node, platform, requested: str, probe: list, work_dir: Path) -> None:
    """Serve `node` with the built-in engine on a free local port and ask the probe over HTTP, in the dtype its
    local answers were computed in."""
    import openai

    from swiftbox.serving.app import build_app
    from swiftbox.serving.launch import open_backend
    from swiftbox.serving.server import ServerThread
    from swiftbox.steps import ServeStep

    dtype = served_dtype(node, platform, requested)
    cfg = ServeStep(engine="builtin", dtype=dtype)
    backend, names, close = open_backend(cfg, node.ref, platform, work_dir=work_dir, log=lambda _m: None)
    server = None
    try:
        server = ServerThread(build_app(backend, api_key=None)).start()
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        served = []
        for conv in probe:
            reply = client.chat.completions.create(model=names.primary, messages=conv, temperature=0,
                                                   max_tokens=MAX_NEW_TOKENS)
            served.append((reply.choices[0].message.content or "").strip())
    except openai.OpenAIError as exc:
        report.add("parity", f"{node.label} -> served (builtin)", False,
                   f"the engine answered with an error: {str(exc).splitlines()[0][:160]}")
        return
    finally:
        if server is not None:
            server.stop()
        close()
    local = node.answers[dtype]
    fig = {"greedy_agreement": agreement(local, served)}
    ok, text = gate(fig, LINK_LIMITS["serve"], "serve")
    text += f"; both in {dtype}"
    first = next((i for i, (x, y) in enumerate(zip(local, served)) if x != y), None)
    if first is not None:
        text += f"; first difference: probe {first}: local {local[first]!r} vs served {served[first]!r}"
    report.add("parity", f"{node.label} -> served (builtin, HTTP)", ok, text)
