"""Datasets: read files (reading), normalise the peers' row formats into chat messages (formats), find each
assistant reply in the chat template's full rendering (render) and turn conversations into labelled tokens,
DPO prompt/completion strings and scored choices (encode). Nothing here imports torch.

Public API used by the pipelines:
    load_sft / load_dpo / load_kto / load_eval / load_texts   rows from dataset specs
    tokenize_sft(rows, tokenizer, max_length)        -> ([{input_ids, labels}], Counts)
    dpo_strings(rows, tokenizer, max_length)         -> ([{prompt, chosen, rejected}], Counts)
    kto_strings(rows, tokenizer, max_length)         -> ([{prompt, completion, label}], Counts)
    preference_ids(tokenizer, example, sides)        -> {prompt_ids, <side>_ids}: those strings as TRL's token columns
    grpo_prompts(rows, tokenizer, max_length)        -> ([{prompt, solution}], Counts)
    encode(tokenizer, messages, tools, only_last=)   -> Encoded (ids, labels, reply token ranges)
    stream_sft(dataset, tokenizer, max_length, ...)   -> a generator of {input_ids, labels} (streaming: true)
    texts.documents / texts.pack / texts.one_per_row  raw text for pt (lazy)
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from swiftbox.data.encode import (
    Counts,
    Encoded,
    dpo_strings,
    encode,
    fit,
    grpo_prompts,
    kto_strings,
    preference_ids,
    tokenize_sft,
)
from swiftbox.data.formats import (
    DPO_FORMATS,
    GRPO_FORMATS,
    KTO_FORMATS,
    SFT_FORMATS,
    Skip,
    dpo_row,
    grpo_row,
    kto_row,
    sft_row,
    with_switches,
)
from swiftbox.data.progress import each
from swiftbox.data.reading import MAX_ROW_CHARS, read_file, read_rows, split_spec
from swiftbox.data.render import locate, render
from swiftbox.data.streaming import rows as stream_rows
from swiftbox.data.texts import text_files
from swiftbox.errors import UserError

__all__ = ["Counts", "Encoded", "dpo_strings", "encode", "fit", "kto_strings", "grpo_prompts", "tokenize_sft",
           "preference_ids",
           "DPO_FORMATS", "KTO_FORMATS", "GRPO_FORMATS", "SFT_FORMATS", "dpo_row", "kto_row", "grpo_row", "sft_row",
           "MAX_ROW_CHARS", "read_file", "read_rows", "split_spec", "locate", "render", "use_chat_template", "load_sft",
           "load_dpo", "load_kto", "load_grpo", "load_eval", "load_texts", "stream_sft", "with_switches",
           "text_files"]

Dataset = Union[str, list[str]]


def _normalise(rows, convert, formats: Iterable[str], kind: str) -> list:
    out = []
    for path, no, row in each(rows, f"checking {kind} rows"):
        try:
            out.append(convert(row))
        except Skip:
            raise UserError(f"dataset {path}: columns {sorted(row)} (row {no}) fit no {kind} format; "
                            f"expected one of: {' | '.join(formats)}") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UserError(f"dataset {path}: row {no}: {exc}") from None
    return out


def use_chat_template(tokenizer, path: Optional[str]) -> None:
    """Replace the tokenizer's chat template with the Jinja file at `path` (saved with the artifact)."""
    if not path:
        return
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"chat_template {path}: file not found; expected a Jinja (.jinja) chat template file")
    tokenizer.chat_template = file.read_text(encoding="utf-8")


def load_sft(dataset: Dataset, seed: int = 42, max_row_chars: int = MAX_ROW_CHARS) -> list[dict]:
    """{"messages": [...], "tools"?} per row."""
    return _normalise(read_rows(dataset, seed, max_row_chars), sft_row, SFT_FORMATS, "SFT")


def load_dpo(dataset: Dataset, seed: int = 42, max_row_chars: int = MAX_ROW_CHARS) -> list[dict]:
    """{"prompt", "chosen", "rejected" (message lists), "tools"?} per row."""
    return _normalise(read_rows(dataset, seed, max_row_chars), dpo_row, DPO_FORMATS, "DPO")


def load_kto(dataset: Dataset, seed: int = 42, max_row_chars: int = MAX_ROW_CHARS) -> list[dict]:
    """{"prompt", "completion" (message lists), "label" (bool), "tools"?} per row."""
    return _normalise(read_rows(dataset, seed, max_row_chars), kto_row, KTO_FORMATS, "KTO")


def load_grpo(dataset: Dataset, seed: int = 42, max_row_chars: int = MAX_ROW_CHARS) -> list[dict]:
    """{"prompt": [...], "reference": str | None, "tools"?} per row."""
    return _normalise(read_rows(dataset, seed, max_row_chars), grpo_row, GRPO_FORMATS, "GRPO")


def load_eval(dataset: Dataset, limit: Optional[int] = None) -> list[tuple[list[dict], str]]:
    """(prompt messages, reference) pairs: prompt = all but the last assistant turn."""
    rows = read_rows(dataset)
    if limit:
        rows = rows[:limit]
    out = []
    for r in _normalise(rows, sft_row, SFT_FORMATS, "eval"):
        if r["messages"][-1]["role"] != "assistant" or not isinstance(r["messages"][-1].get("content"), str):
            raise UserError(f"eval dataset {dataset}: every row must end with an assistant reply in text (the "
                            f"reference answer)")
        out.append((r["messages"][:-1], r["messages"][-1]["content"]))
    return out


def load_texts(path: Union[str, Path]) -> list[str]:
    """Texts for perplexity: a .txt file (paragraphs) or rows with `text` (else rendered as plain turns)."""
    path = Path(path).expanduser()
    if path.suffix.lower() == ".txt":
        if not path.is_file():
            raise UserError(f"perplexity {path}: file not found; expected a .txt, .jsonl, .json or .parquet file")
        texts = [p.strip() for p in path.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
        if not texts:
            raise UserError(f"perplexity {path}: holds no text")
        return texts
    out = []
    for p, _no, row in read_rows(str(path)):
        if isinstance(row.get("text"), str):
            out.append(row["text"])
            continue
        try:
            out.append("\n".join(m["content"] or "" for m in sft_row(row)["messages"]))
        except (Skip, ValueError, TypeError, KeyError):
            raise UserError(f"perplexity {p}: columns {sorted(row)} hold no text; expected text or one of: "
                            f"{' | '.join(SFT_FORMATS)}") from None
    return out


def stream_sft(dataset: Dataset, tokenizer, max_length: int, *, counts: Counts,
               max_row_chars: int = MAX_ROW_CHARS, switches: Optional[dict] = None) -> Iterator[dict]:
    """SFT rows read lazily from jsonl, normalised and tokenized one at a time ({input_ids, labels}); `counts`
    adds up the rows seen, truncated and dropped; `switches`: the step's chat_template_kwargs (formats.with_switches).
    (training.streaming shuffles them in a buffer.)"""
    for item in stream_rows(dataset, max_row_chars):
        rows = with_switches(_normalise([item], sft_row, SFT_FORMATS, "SFT"), switches)
        done, row_counts = tokenize_sft(rows, tokenizer, max_length)
        counts.rows += row_counts.rows
        counts.truncated += row_counts.truncated
        counts.dropped += row_counts.dropped
        yield from done
