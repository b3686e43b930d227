"""verify for a GGUF export (`quantize --method gguf`, with or without --adapter-only), engine llama.cpp.

- files: the header reads (first with the bounded reader, swiftbox/hub/gguf_header.py: magic, every count and
  length capped against the file's size, before gguf's GGUFReader reads its arrays eagerly), the tensor table
  holds what the header says, the decoder weights have the type the
  manifest names, the tokenizer (model, tokens, end-of-sequence id) and the chat template are in the file, and
  the Modelfile's FROM / ADAPTER name files that are there;
- engine: llama.cpp (the bindings) loads the file - a GGUF LoRA on its base - and agrees on the vocabulary;
- parity: the chain up to the model the GGUF was made from is measured as for any export (chain.py), then the
  link source -> GGUF runs the probe in llama.cpp: cosine / argmax on the same token ids, and the greedy
  continuations of the probe prompts against the source's.
"""
from __future__ import annotations

import re
from pathlib import Path

from swiftbox.artifacts import read_manifest
from swiftbox.verify.report import Report

# link source -> GGUF, by the bits the GGUF type is gated as (whole 8-token answers after 4-6 bits: reported)
GGUF_LINK_LIMITS: dict[int, dict[str, float]] = {
    16: {"min_cosine": 0.999, "min_argmax": 0.97, "min_greedy": 0.75},
    8: {"min_cosine": 0.99, "min_argmax": 0.85, "min_greedy": 0.5},
    6: {"min_cosine": 0.98, "min_argmax": 0.8},
    5: {"min_cosine": 0.97, "min_argmax": 0.75},
    4: {"min_cosine": 0.95, "min_argmax": 0.65},
}
ENGINE = "llama.cpp"


def is_gguf_artifact(artifact: str) -> bool:
    path = Path(artifact)
    if path.is_file():
        return path.suffix == ".gguf"
    manifest = (read_manifest(path) if path.is_dir() else None) or {}
    return (manifest.get("quantization") or {}).get("method") == "gguf" or (
        path.is_dir() and any(path.glob("*.gguf")) and not (path / "config.json").is_file())


def _files(artifact: Path) -> tuple[Path | None, Path | None, dict]:
    """(model GGUF, LoRA GGUF or None, manifest quantization block)."""
    if artifact.is_file():
        return artifact, None, {}
    quant = ((read_manifest(artifact) or {}).get("quantization") or {})
    if quant.get("adapter_only"):
        return artifact / str(quant.get("base_file")), artifact / str(quant.get("file")), quant
    if quant.get("file"):
        return artifact / str(quant["file"]), None, quant
    found = sorted(artifact.glob("*.gguf"))
    return (found[0] if found else None), None, quant


def check_files(report: Report, model: Path | None, lora: Path | None, quant: dict, folder: Path | None):
    """Header, tensors, tokenizer, template, Modelfile. Returns the model's GGUFInfo (None when unusable)."""
    from swiftbox.export.llamacpp import gguf_file
    from swiftbox.export.llamacpp.gguf_file import inspect

    if model is None or not model.is_file():
        report.add("files", "gguf", False, f"no GGUF file found ({model or folder})")
        return None
    from swiftbox.errors import UserError
    from swiftbox.hub import gguf_header

    try:
        gguf_header.read(model)           # bounded: a header that claims more than the file holds ends here
        info = gguf_file.read(model)
    except (ValueError, UserError) as exc:
        report.add("files", f"{model.name}: header", False, str(exc))
        return None
    counts_ok = info.tensor_count == info.header_tensor_count and info.tensor_count > 0
    types = ", ".join(f"{k} {v}" for k, v in sorted(info.type_counts.items()))
    report.add("files", f"{model.name}: header", counts_ok,
               f"GGUF v{info.version}, {info.architecture}, {info.tensor_count} tensors ({types})" if counts_ok else
               f"the header announces {info.header_tensor_count} tensors, the table holds {info.tensor_count}")
    wanted = quant.get("type")
    if wanted:
        seen = inspect(info, wanted)
        ok = not seen["error"] and seen["quantized_modules"] == seen["linear_modules"]
        report.add("files", f"{model.name}: {wanted} weights", ok,
                   f"{seen['linear_modules']} decoder weights stored as {wanted}" if ok else
                   (seen["error"] or f"{seen['linear_modules'] - seen['quantized_modules']} decoder weight(s) are not "
                    f"{wanted} (e.g. {', '.join(seen['unquantized'])})"))
    tok_problems = []
    if not info.meta.get("tokenizer.ggml.model"):
        tok_problems.append("no tokenizer.ggml.model")
    if info.tokens == 0:
        tok_problems.append("no tokens")
    if info.meta.get("tokenizer.ggml.eos_token_id") is None:
        tok_problems.append("no end-of-sequence id")
    report.add("files", f"{model.name}: tokenizer", not tok_problems, "; ".join(tok_problems) or
               f"{info.meta.get('tokenizer.ggml.model')} ({info.meta.get('tokenizer.ggml.pre', '-')}), "
               f"{info.tokens} tokens, eos {info.meta.get('tokenizer.ggml.eos_token_id')}")
    report.add("files", f"{model.name}: chat template", bool(info.chat_template),
               "tokenizer.chat_template is stored" if info.chat_template else
               "the GGUF has no tokenizer.chat_template: llama.cpp and Ollama cannot render chats with the "
               "model's own format")
    if lora is not None:
        try:
            gguf_header.read(lora)
            adapter = gguf_file.read(lora)
            ok = adapter.general_type == "adapter" and adapter.meta.get("adapter.type") == "lora"
            detail = (f"GGUF LoRA, {adapter.tensor_count} tensors, alpha {adapter.meta.get('adapter.lora.alpha')}"
                      if ok else f"general.type {adapter.general_type!r}, adapter.type "
                      f"{adapter.meta.get('adapter.type')!r} (expected adapter / lora)")
        except (ValueError, UserError) as exc:
            ok, detail = False, str(exc)
        report.add("files", f"{lora.name}: LoRA", ok, detail)
    if folder is not None:
        check_modelfile(report, folder)
    return info if counts_ok else None


def check_modelfile(report: Report, folder: Path) -> None:
    path = folder / "Modelfile"
    if not path.is_file():
        report.add("files", "Modelfile", False, "no Modelfile beside the GGUF (ollama create needs one)")
        return
    text = path.read_text(encoding="utf-8")
    named = re.findall(r"^(?:FROM|ADAPTER)\s+(\S+)", text, flags=re.M)
    missing = [n for n in named if n.startswith(".") and not (folder / n).is_file()]
    stops = re.findall(r"^PARAMETER stop ", text, flags=re.M)
    problems = ([f"names {', '.join(missing)}, which is not there"] if missing else []) + (
        [] if named else ["has no FROM line"])
    report.add("files", "Modelfile", not problems, "; ".join(problems) or
               f"FROM/ADAPTER {', '.join(named)}; {'TEMPLATE, ' if 'TEMPLATE' in text else 'no TEMPLATE, '}"
               f"{len(stops)} stop(s)")


def check_engine(report: Report, model: Path, lora: Path | None, info, platform) -> bool:
    from swiftbox.export.llamacpp import runner

    refusal = platform.why_not("gguf")
    if refusal is not None:
        report.add("engine", f"{ENGINE} loads it", False, f"{refusal.why}; use {refusal.instead}")
        return False
    try:
        with runner.load(model, n_ctx=256, lora=lora) as loaded:
            n_vocab = loaded.n_vocab
    except ValueError as exc:
        report.add("engine", f"{ENGINE} loads it", False, str(exc))
        return False
    ok = info is None or info.tokens in (0, n_vocab)
    report.add("engine", f"{ENGINE} loads it", ok, f"{model.name}{' + ' + lora.name if lora else ''}: vocabulary "
               f"{n_vocab}" if ok else f"llama.cpp's vocabulary ({n_vocab}) differs from the file's tokens "
               f"({info.tokens})")
    return ok


def verify_gguf(artifact: str, *, against: str | None, platform, dtype: str, probe: list) -> Report:
    """The whole gate for a GGUF export."""
    path = Path(artifact)
    report = Report(artifact=artifact, engine=ENGINE)
    model, lora, quant = _files(path)
    folder = path if path.is_dir() else None
    info = check_files(report, model, lora, quant, folder)
    if info is None or model is None or report.failures:
        report.add("parity", "chain", None, "skipped: the files above must pass first")
        return report
    if not check_engine(report, model, lora, info, platform):
        report.add("parity", "chain", None, "skipped: llama.cpp must load the file first")
        return report
    manifest = (read_manifest(path) if path.is_dir() else None) or {}
    source = manifest.get("input") if manifest.get("kind") == "quantize" else None
    head = source or against
    if not head:
        report.add("parity", f"source -> {ENGINE}", None, "skipped: no manifest names the source; pass --against "
                   "MODEL_DIR (the model the GGUF was made from)")
        return report
    measure_chain(report, head, against if head != against else None, model, lora, quant, platform, dtype, probe)
    report.add("parity", f"gguf -> served ({ENGINE})", None, "not measured here: serve the GGUF with llama-server or "
               "Ollama (the engine check above loaded it in llama.cpp)")
    return report


def measure_chain(report: Report, head: str, against: str | None, model: Path, lora: Path | None, quant: dict,
                  platform, dtype: str, probe: list) -> None:
    """The torch chain up to `head` (chain.py), then head -> GGUF in llama.cpp."""
    import torch

    from swiftbox import parity as P
    from swiftbox.export.llamacpp import runner
    from swiftbox.modeling.loading import load_tokenizer, resolve_spec
    from swiftbox.verify import chain

    nodes = chain.build_chain(head, against)
    chain.measure(nodes, platform, dtype, probe)
    chain.check_links(report, nodes, platform, dtype)
    last = nodes[-1]
    # the torch side in the dtype chain.measure used for the last node (the platform's answer to `dtype`)
    wanted = platform.resolve_dtype(dtype)
    key = wanted if wanted in last.logits else next(iter(last.logits))
    last_logits, last_answers = last.logits[key], last.answers[key]
    tok = load_tokenizer(resolve_spec(nodes[0].ref))
    batch = P.encode(tok, P.render(tok, probe))
    mask = batch["attention_mask"]
    rows = [batch["input_ids"][i][mask[i].bool()].tolist() for i in range(len(probe))]
    spec = resolve_spec(last.ref)
    own_tok = load_tokenizer(spec)
    stops = {t for t in [own_tok.eos_token_id] if isinstance(t, int)}
    from swiftbox.export.llamacpp.runner import stop_ids

    stops |= stop_ids(own_tok, spec.base)
    with runner.load(model, n_ctx=max(len(r) for r in rows) + chain.MAX_NEW_TOKENS + 8, lora=lora) as gguf:
        logits = torch.zeros_like(last_logits)
        for i, ids in enumerate(rows):
            logits[i, : len(ids)] = torch.from_numpy(gguf.logits(ids))
        answers = [own_tok.decode(gguf.greedy(ids, chain.MAX_NEW_TOKENS, stops), skip_special_tokens=True).strip()
                   for ids in rows]
    fig = P.compare(last_logits, logits, mask)
    fig["greedy_agreement"] = chain.agreement(last_answers, answers)
    bits = int(quant.get("bits") or 16)
    limits = GGUF_LINK_LIMITS[min(GGUF_LINK_LIMITS, key=lambda b: abs(b - bits))]
    ok, text = chain.gate(fig, limits, f"gguf{bits}")
    first = next((i for i, (x, y) in enumerate(zip(last_answers, answers)) if x != y), None)
    if first is not None and not ok:
        text += f"; first difference: probe {first}: torch {last_answers[first]!r} vs llama.cpp {answers[first]!r}"
    report.add("parity", f"{last.label} -> gguf {quant.get('type', '')} ({ENGINE})".replace("  ", " "), ok, text)
