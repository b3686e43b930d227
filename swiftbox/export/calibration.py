"""Calibration and held-out text for the quantize step, and the GPTQ/AWQ group size that fits the layers.

Calibration data: `dataset:`, else the training data named in the lineage's manifests, else the bundled
text. A fixed shuffle holds rows out of calibration to measure perplexity before and after on.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from swiftbox.errors import UserError

BUNDLED = Path(__file__).resolve().parent.parent / "assets" / "toy_corpus.txt"
MAX_HELD_OUT = 32


def calibration_files(cfg, manifests: list[dict]) -> tuple[list[Path], str]:
    """(files, where they came from): the user's dataset, the training data the input's lineage (`manifests`,
    swiftbox.artifacts.lineage) names, or bundled text."""
    if cfg.dataset:
        path = _data_path(cfg.dataset)
        if not path.is_file():
            raise UserError(f"quantize.dataset: calibration file {cfg.dataset} not found; expected a .jsonl/.json/.txt "
                            "file")
        return [path], "dataset"
    named = lineage_datasets(manifests)
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
    """Calibration texts: chat rows rendered with the tokenizer's template, plain rows and lines as they are.
    `tokenizer=None` (the step's check, before any model is loaded) validates the files the same way: bad JSON or
    no usable row is refused there, with the same line."""
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
