"""`./launch.sh verify ARTIFACT [--engine builtin|vllm] [--against BASE_OR_ADAPTER]`: the pre-deploy gate.

One table, exit 1 when any check fails, each failure also printed as one line naming what is wrong:
- files (files.py): safetensors only and readable, quantized layers really quantized, tokenizer, chat
  template renders the probe, generation config stops at the end of turn and does not sample by surprise;
- engine (engine_fit.py, with the facts from swiftbox/serving/fit.py): adapters against the engine's LoRA
  limits, the quantization format against what the engine serves on this platform;
- parity (chain.py): base+adapter -> merged -> quantized -> served, per link max |Δlogit|, argmax and
  greedy-answer agreement with thresholds per link type.
A GGUF export (quantize --method gguf) is checked by gguf.py against llama.cpp instead.

    import swiftbox as sb
    report = sb.verify("runs/quickstart/quantize")     # Report; report.ok, report.failures
(`swiftbox.verify` is both this package and the function, as `swiftbox.parity` is; the recipe step
`- verify: {}` runs the same gate through swiftbox/pipelines/verify.py.)
"""
from __future__ import annotations

import json
import sys
import tempfile
import types
from argparse import ArgumentParser
from collections.abc import Sequence
from pathlib import Path

from swiftbox.errors import Unsupported, UserError
from swiftbox.serving.fit import ENGINES, vocab_size
from swiftbox.verify.report import Check, Report, print_table


def _heads(spec) -> list[tuple[str, Path]]:
    """(label, folder) of what the artifact loads: the base (model or quantized export) and its adapters."""
    return [("model", spec.base)] + [(f"adapter {a.name}", a) for a in spec.adapters]


def static_checks(report: Report, artifact: str, engine: str, platform, probe: list):
    """files + engine fit (no weights loaded into a model). Returns the artifact's ModelSpec, or None."""
    from swiftbox.modeling.loading import resolve_spec
    from swiftbox.verify import engine_fit, files

    try:
        spec = resolve_spec(artifact)
    except UserError as exc:
        report.add("files", "artifact", False, str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - an artifact that cannot even be resolved is the finding
        report.add("files", "artifact", False, f"cannot be read ({' '.join(str(exc).split())[:160]})")
        return None
    weights_ok = all([files.check_weights(report, label, folder) for label, folder in _heads(spec)])  # noqa: C419 - every head checked
    weights_ok = all([files.check_adapter(report, f"adapter {a.name}", a) for a in spec.adapters]) and weights_ok  # noqa: C419
    tok = files.check_tokenizer(report, "tokenizer", spec, probe)
    files.check_generation_config(report, "model", spec.base, tok)
    base_vocab = vocab_size(spec.base)
    engine_fit.check_adapters(report, spec.adapters, engine, base_vocab)
    engine_fit.check_quantization(report, spec.quantized, engine, platform)
    return spec if weights_ok and tok is not None else None


def check_arguments(artifact: str, engine: str, dtype: str) -> None:
    """The gate's refusals of its arguments (exit 2), before anything is loaded: the verify step's check and
    `verify()` both call it."""
    if engine not in ENGINES:
        raise UserError(f"verify --engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    if not artifact or (not Path(artifact).exists() and artifact != "toy"):
        raise UserError(f"verify: {artifact or 'no artifact'} does not exist; pass a model, adapter, merged or "
                        "quantized directory")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise UserError(f"verify --dtype: expected auto, float32, bfloat16 or float16, got {dtype!r}")


def verify(artifact: str, *, engine: str = "builtin", against: str | None = None, device: str | None = None,
           dtype: str = "auto", serve: bool = True, probe: Sequence | None = None, platform=None) -> Report:
    """Run the whole gate on `artifact` (a model, adapter, merged or quantized directory)."""
    from swiftbox import parity as P
    from swiftbox.device import current_platform
    from swiftbox.verify import chain

    check_arguments(artifact, engine, dtype)
    platform = platform or current_platform(device)
    items = list(probe) if probe is not None else P.default_probe()
    from swiftbox.verify import gguf

    if gguf.is_gguf_artifact(artifact):  # engine llama.cpp: files, engine and parity of its own (verify/gguf.py)
        # the torch side in float32 unless asked otherwise: llama.cpp computes in float32 (see gguf_writer)
        gdt = "float32" if dtype in (None, "", "auto") else dtype
        return gguf.verify_gguf(artifact, against=against, platform=platform, dtype=gdt, probe=items)
    report = Report(artifact=artifact, engine=engine)
    spec = static_checks(report, artifact, engine, platform, items)
    if spec is None:
        report.add("parity", "chain", None, "skipped: the files above must pass first")
        return report
    nodes = chain.build_chain(artifact, against)
    for node in nodes[:-1]:  # the artifact itself was checked above; check what the chain adds
        node_spec = static_checks(Report(node.ref, engine), node.ref, "builtin", platform, items)
        if node_spec is None:
            report.add("parity", f"{node.label} ({node.ref})", False, "cannot be loaded (run verify on it for why)")
            return report
    try:
        chain.measure(nodes, platform, dtype, items)
    except Exception as exc:  # noqa: BLE001 - a model that does not load or run on the probe is the finding
        node = next((n for n in nodes if not n.logits), nodes[-1])   # the one being measured
        report.add("parity", f"{node.label} ({node.ref})", False,
                   f"does not load or run ({' '.join(str(exc).split())[:200]})")
        return report
    chain.check_links(report, nodes, platform, dtype)
    if not serve:
        report.add("parity", "served", None, "skipped (--no-serve)")
    elif engine == "vllm" and platform.why_not("vllm") is not None:
        refusal = platform.why_not("vllm")
        report.add("parity", f"{nodes[-1].label} -> served (vllm)", None, f"skipped: {refusal.why}")
    elif engine == "vllm":
        report.add("parity", f"{nodes[-1].label} -> served (vllm)", None,
                   "skipped: the HTTP link is measured with the built-in engine; run verify --engine builtin")
    else:
        with tempfile.TemporaryDirectory(prefix="swiftbox-verify-") as work:
            chain.check_served(report, nodes[-1], platform, dtype, items, Path(work))
    return report


def startup_gate(ref: str, engine: str, platform) -> None:
    """The cheap part of the gate, for `serve` before it starts: files + engine fit. Raises UserError (2) for
    broken files and Unsupported (3) when the engine cannot load the artifact here."""
    from swiftbox import parity as P

    report = Report(artifact=ref, engine=engine)
    static_checks(report, ref, engine, platform, P.default_probe(4))
    failures = report.failures
    if not failures:
        return
    first: Check = failures[0]
    cls = Unsupported if first.section == "engine" else UserError
    raise cls(f"serve: {ref} fails the pre-deploy check ({first.line()}); see ./launch.sh verify {ref}")


def read_probe(path: str | None) -> list | None:
    """Probe conversations from a file (None: the built-in probe); plain prompts become user turns."""
    from swiftbox import parity as P

    if not path:
        return None
    return [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in P.read_probe(path)]


def verify_parser() -> ArgumentParser:
    """`swiftbox verify`'s flags, read off the step's schema (swiftbox/steps.py VerifyStep: the same settings a
    recipe's verify step takes, with their choices, defaults and help), plus --device and --json (terminal only)."""
    from typing import Literal, get_args, get_origin

    from swiftbox.args import OneLineParser
    from swiftbox.steps import StepBase, VerifyStep

    parser = OneLineParser(prog="swiftbox verify")
    for name, info in VerifyStep.model_fields.items():
        if name in StepBase.model_fields:        # model / output / force: the artifact is the positional, no output
            continue
        flag = name.replace("_", "-")
        if info.default is True:                  # a check on by default: --no-NAME turns it off
            parser.add_argument(f"--no-{flag}", dest=name, action="store_false", help=f"do not {info.description}")
            continue
        closed = get_origin(info.annotation) is Literal
        parser.add_argument(f"--{flag}", dest=name, default=info.default,
                            choices=get_args(info.annotation) if closed else None,
                            help=info.description or f"{name} ({' | '.join(get_args(info.annotation))})")
    parser.add_argument("--device", default=None, help="auto | cpu | cuda | npu")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    return parser


def verify_cli(artifact: str, extra_args: Sequence[str]) -> int:
    args = verify_parser().parse_args([x for x in extra_args if x != "--"])
    from transformers.utils import logging as hf_logging

    from swiftbox import logs

    logs.attach(Path("runs") / "verify" / "swiftbox.log")   # the libraries' banners: there, not on the screen
    hf_logging.disable_progress_bar()                        # a "Loading weights" bar per model in the chain
    report = verify(artifact, engine=args.engine, against=args.against, device=args.device, dtype=args.dtype,
                    serve=args.serve, probe=read_probe(args.probe))
    if args.json:
        print(json.dumps(report.as_dict(), default=str))
    else:
        print_table(report)
    return 0 if report.ok else 1


__all__ = ["Check", "Report", "check_arguments", "startup_gate", "verify", "verify_cli"]


class _CallableModule(types.ModuleType):
    """`swiftbox.verify` is both this package and the function (see swiftbox.parity for why)."""

    def __call__(self, *args, **kwargs):
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
