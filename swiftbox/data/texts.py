"""Raw text for continued pre-training: documents read lazily from `.txt` files (paragraphs split by a blank
line), jsonl files (the `text` column, one row a document) or a directory of them, and the two ways they become
training rows:

- `pack`: documents tokenized, joined with the tokenizer's eos and cut into fixed blocks of `block_size`
  tokens (the last block may be shorter); every token is a label (no masks);
- `one_per_row`: one document per row, truncated to `block_size` (the collator pads) - for the model types the
  registry lists as not packing exactly (catalog.presets.PACKING_NOT_EXACT: Mamba-only and state-space families,
  Kimi-Linear, gpt-oss, GLM-5, custom code); the hybrids whose mixers run per packed sample pack.

Everything here is a generator over the files, so the streaming path holds one document (or one block) at a
time; the in-memory path just lists it. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union

from swiftbox.data.reading import MAX_ROW_CHARS
from swiftbox.data.streaming import jsonl_values
from swiftbox.errors import UserError

TEXT_SUFFIXES = (".txt", ".jsonl")


def text_files(dataset: Union[str, list[str]]) -> list[Path]:
    """The files a pt dataset names: .txt / .jsonl files, or directories of them (sorted, not recursive)."""
    specs = [dataset] if isinstance(dataset, str) else list(dataset)
    if not specs:
        raise UserError("dataset: expected a path or a list of paths, got an empty list")
    files: list[Path] = []
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
            if not found:
                raise UserError(f"dataset {spec}: the directory holds no .txt or .jsonl file")
            files += found
        elif not path.is_file():
            raise UserError(f"dataset {spec}: file not found; expected a .txt or .jsonl file or a directory of them")
        elif path.suffix.lower() not in TEXT_SUFFIXES:
            raise UserError(f"dataset {spec}: raw text is read from .txt or .jsonl (a `text` column), not "
                            f"{path.suffix or 'a file without suffix'}")
        else:
            files.append(path)
    return files


def documents(dataset: Union[str, list[str]], max_row_chars: int = MAX_ROW_CHARS) -> Iterator[str]:
    """Every document of the dataset, in file order, read lazily (one paragraph / row in memory at a time)."""
    for path in text_files(dataset):
        reader = _txt_documents if path.suffix.lower() == ".txt" else _jsonl_documents
        yield from reader(path, max_row_chars)


def _txt_documents(path: Path, max_row_chars: int) -> Iterator[str]:
    lines: list[str] = []
    size = 0
    with open(path, encoding="utf-8-sig", errors="strict", newline=None) as fh:
        try:
            for no, line in enumerate(fh, 1):
                if line.strip():
                    lines.append(line)
                    size += len(line)
                    if size > max_row_chars:
                        raise UserError(f"dataset {path}: the paragraph ending at line {no} has over {max_row_chars} "
                                        f"characters without a blank line; split it or raise max_row_chars")
                elif lines:
                    yield "".join(lines).strip()
                    lines, size = [], 0
        except UnicodeDecodeError:
            raise UserError(f"dataset {path}: not a UTF-8 text file") from None
    if lines:
        yield "".join(lines).strip()


def _jsonl_documents(path: Path, max_row_chars: int) -> Iterator[str]:
    for no, row in jsonl_values(path, max_row_chars):
        text = row.get("text") if isinstance(row, dict) else None
        if not isinstance(text, str):
            cols = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise UserError(f"dataset {path}: row {no} ({cols}) has no `text` string; pt reads raw text")
        if text.strip():
            yield text


@dataclass
class TextCounts:
    documents: int = 0
    tokens: int = 0
    truncated: int = 0          # one_per_row: documents cut at block_size
    blocks: int = 0


Tokenize = Callable[[str], list[int]]


def token_ids(tokenizer) -> Tokenize:
    """A document -> its token ids followed by the tokenizer's eos (the separator between documents)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise UserError("pt: the tokenizer has no eos token to separate documents; set one in its tokenizer_config")

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [eos]
    return encode


def pack(docs: Iterable[str], encode: Tokenize, block_size: int, counts: TextCounts | None = None) -> Iterator[dict]:
    """Documents joined (each ends with eos) and cut into blocks of `block_size` tokens, labels = input_ids."""
    counts = counts if counts is not None else TextCounts()
    buf: list[int] = []
    for doc in docs:
        ids = encode(doc)
        counts.documents += 1
        counts.tokens += len(ids)
        buf += ids
        while len(buf) >= block_size:
            block, buf = buf[:block_size], buf[block_size:]
            counts.blocks += 1
            yield {"input_ids": block, "labels": list(block)}
    if len(buf) >= 2:
        counts.blocks += 1
        yield {"input_ids": buf, "labels": list(buf)}


def one_per_row(docs: Iterable[str], encode: Tokenize, block_size: int,
                counts: TextCounts | None = None) -> Iterator[dict]:
    """One document per row, cut to `block_size` tokens (the collator pads a batch), labels = input_ids."""
    counts = counts if counts is not None else TextCounts()
    for doc in docs:
        ids = encode(doc)
        counts.documents += 1
        counts.tokens += min(len(ids), block_size)
        if len(ids) > block_size:
            counts.truncated += 1
            ids = ids[:block_size]
        if len(ids) >= 2:
            counts.blocks += 1
            yield {"input_ids": ids, "labels": list(ids)}
