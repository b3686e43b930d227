"""verify, section "files": what must be on disk and loadable before anything is served.

Weights are safetensors only and every shard's header reads; a quantized model stores its decoder linear
layers quantized; an adapter's config is one PEFT reads, its weights are finite, and it is a plain delta on its base
(not trained with an initialisation that rewrote the base: PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA, until PEFT converts
it); the tokenizer loads; the chat template renders the probe conversations; the generation config stops at the
template's end-of-turn token and does not turn sampling on by surprise.
"""
from __future__ import annotations

import json
from pathlib import Path

from swiftbox.modeling.adapter_file import AdapterFile, AdapterFileError, init_problem, rewrites_base, type_problem
from swiftbox.verify.report import Report

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def _short(exc: BaseException, limit: int = 160) -> str:
    return " ".join(str(exc).split())[:limit] or type(exc).__name__


def check_adapter(report: Report, label: str, folder: Path) -> bool:
    """The adapter's config reads as PEFT reads it, says a plain delta, and its weights are finite."""
    try:
        record = AdapterFile.read(folder)
    except AdapterFileError as exc:
        report.add("files", f"{label}: config", False, exc.reason)
        return False
    problems = _config_problems(record)
    if not problems:
        try:
            from peft import PeftConfig

            PeftConfig.from_pretrained(str(folder))
        except Exception as exc:  # noqa: BLE001 - a check: whatever PEFT refuses is the finding
            problems.append(f"PEFT cannot read adapter_config.json ({_short(exc)})")
    if problems:
        report.add("files", f"{label}: config", False, "; ".join(problems))
        return False
    report.add("files", f"{label}: config", True, f"{record.peft_type} r={record.r}, a plain "
               "delta on its base")
    return check_finite(report, label, sorted(folder.glob("*.safetensors")))


def _config_problems(record: AdapterFile) -> list[str]:
    problems = [p for p in (type_problem(record),) if p]
    init = init_problem(record.init)
    if init:
        problems.append(init + (" and verify the converted one" if rewrites_base(record.init) else ""))
    return problems


def check_finite(report: Report, label: str, shards: list[Path]) -> bool:
    """Every floating tensor finite (adapters are small enough to read whole, one tensor at a time)."""
    import torch
    from safetensors import safe_open

    bad: list[str] = []
    for file in shards:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                    tensor = handle.get_tensor(name)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        bad.append(name)
        except Exception as exc:  # noqa: BLE001 - safetensors' own error types
            report.add("files", f"{label}: weights finite", False, f"{file.name} cannot be read ({_short(exc, 140)})")
            return False
    report.add("files", f"{label}: weights finite", not bad,
               f"{len(bad)} tensor(s) hold NaN or inf (e.g. {bad[0]}): every answer through it would be garbage"
               if bad else "no NaN or inf")
    return not bad


def check_weights(report: Report, label: str, folder: Path) -> bool:
    """safetensors only, every shard readable, the index's shards present, quantized layers really quantized."""
    from swiftbox.modeling.loading import read_quantization

    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and "training_args" not in p.name)
    shards = sorted(folder.glob("*.safetensors"))
    if pickles:
        report.add("files", f"{label}: safetensors only", False, f"pickle weights {', '.join(pickles[:3])} "
                   "(they can run code when loaded); re-save with safetensors")
        return False
    if not shards:
        report.add("files", f"{label}: weights", False, f"no *.safetensors in {folder}")
        return False
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            named = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            report.add("files", f"{label}: weights", False, f"{index.name} is not a valid shard index")
            return False
        missing = sorted(n for n in named if not (folder / n).is_file())
        if missing:
            report.add("files", f"{label}: weights", False, f"shards named by {index.name} are missing: {missing[:3]}")
            return False
    try:
        dtypes, shapes = read_headers(shards)
    except ValueError as exc:
        report.add("files", f"{label}: weights", False, str(exc))
        return False
    report.add("files", f"{label}: weights", True, f"{len(shards)} safetensors shard(s), {len(dtypes)} tensors")
    quant = read_quantization(folder).get("quant_method")
    if quant:
        plain = sorted(n for n, d in dtypes.items() if d in FLOAT_DTYPES and len(shapes[n]) == 2
                       and ".layers." in n and n.endswith(".weight") and "norm" not in n)
        ok = not plain
        report.add("files", f"{label}: {quant} layers quantized", ok,
                   "every decoder linear layer is stored quantized" if ok else
                   f"{len(plain)} decoder linear weight(s) stored in full precision despite quant_method {quant} "
                   f"(e.g. {plain[0]}): the export did not quantize")
        return ok
    return True


def read_headers(shards: list[Path]) -> tuple[dict[str, str], dict[str, list[int]]]:
    from safetensors import safe_open

    dtypes: dict[str, str] = {}
    shapes: dict[str, list[int]] = {}
    for file in shards:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                    sl = handle.get_slice(name)
                    dtypes[name], shapes[name] = str(sl.get_dtype()), list(sl.get_shape())
        except Exception as exc:  # noqa: BLE001 - every kind of damage raises safetensors' own error types
            raise ValueError(f"{file.name} cannot be read ({' '.join(str(exc).split())[:140]})") from None
    return dtypes, shapes


def check_tokenizer(report: Report, label: str, spec, probe: list) -> object | None:
    """Loads the tokenizer and renders the probe; returns it (None when it cannot be used)."""
    from swiftbox.modeling.loading import load_tokenizer

    try:
        tok = load_tokenizer(spec)
    except Exception as exc:  # noqa: BLE001 - a check: any failure to load is the finding
        report.add("files", f"{label}: tokenizer", False, f"does not load ({' '.join(str(exc).split())[:140]})")
        return None
    if not getattr(tok, "chat_template", None):
        report.add("files", f"{label}: chat template", False, "the tokenizer has no chat_template; chat requests "
                   "cannot be rendered")
        return tok
    from swiftbox.data.template_budget import budget, template_sources

    try:
        with budget(label, template_sources(tok)):       # time and output size bounded (data/template_budget.py)
            for conv in probe:
                tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - templates raise jinja and arbitrary errors
        report.add("files", f"{label}: chat template", False,
                   f"fails on the probe ({' '.join(str(exc).split())[:140]})")
        return tok
    report.add("files", f"{label}: chat template", True, f"renders {len(probe)} probe conversations")
    return tok


def end_of_turn_id(tok) -> int | None:
    """The token the template puts right after an assistant reply (e.g. <|im_end|>), when it is a special token."""
    marker = "VERIFYMARKER"
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}],
                                       tokenize=False)
    except Exception:  # noqa: BLE001 - no renderable assistant turn: no end-of-turn to check
        return None
    after = text.split(marker, 1)[1] if marker in text else ""
    ids = tok(after, add_special_tokens=False)["input_ids"] if after.strip() else []
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    return ids[0] if ids and ids[0] in special else None


def check_generation_config(report: Report, label: str, folder: Path, tok) -> None:
    gen_file, cfg_file = folder / "generation_config.json", folder / "config.json"
    try:
        gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    except ValueError as exc:
        report.add("files", f"{label}: generation config", False, f"not valid JSON ({exc})")
        return
    eos = gen.get("eos_token_id", cfg.get("eos_token_id"))
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    problems = []
    turn = end_of_turn_id(tok) if tok is not None else None
    if turn is not None and turn not in eos_ids:
        problems.append(f"eos_token_id {sorted(eos_ids)} does not include the template's end-of-turn "
                        f"{tok.convert_ids_to_tokens(turn)!r} (id {turn}): answers would run past the turn")
    if gen.get("do_sample") is True and not any(k in gen for k in ("temperature", "top_p", "top_k")):
        problems.append("do_sample is true with no temperature/top_p/top_k (a tool turned sampling on); "
                        "copy the source model's generation_config.json")
    report.add("files", f"{label}: generation config", not problems,
               "; ".join(problems) or f"eos {sorted(eos_ids)} includes the end of turn"
               + ("" if turn is not None else " (template has no special end-of-turn token)"))
