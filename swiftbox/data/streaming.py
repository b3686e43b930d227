"""Streaming datasets: rows read lazily from jsonl files (one line in memory at a time); training.streaming
shuffles them in a buffer, so a training step over a file larger than RAM holds `shuffle_buffer` rows, not the file.

Only what can be read lazily is accepted: jsonl for the chat steps (json arrays and parquet are read whole;
`path#N` sampling needs the whole file) - anything else is one line, exit 2. Nothing here imports torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Union

from swiftbox.data.reading import MAX_ROW_CHARS
from swiftbox.errors import UserError


def jsonl_files(dataset: Union[str, list[str]]) -> list[Path]:
    """The jsonl files of a streaming dataset spec (refusing what cannot be read lazily)."""
    specs = [dataset] if isinstance(dataset, str) else list(dataset)
    if not specs:
        raise UserError("dataset: expected a path or a list of paths, got an empty list")
    files = []
    for spec in specs:
        path = Path(spec).expanduser()
        if not path.is_file():
            hint = " (path#N sampling reads the whole file; streaming takes plain paths)" if "#" in spec else ""
            raise UserError(f"dataset {spec}: file not found{hint}")
        if path.suffix.lower() != ".jsonl":
            raise UserError(f"dataset {spec}: streaming reads .jsonl files line by line; {path.suffix or 'this file'} "
                            f"is read whole - convert it to jsonl or train without streaming")
        files.append(path)
    return files


def jsonl_values(path: Path, max_row_chars: int = MAX_ROW_CHARS) -> Iterator[tuple[int, Any]]:
    """(line number, decoded JSON value) for every non-blank line of a jsonl file, lazily - the one jsonl reader of
    the lazy paths (chat rows here, pt documents in texts.py): UTF-8 (a BOM tolerated), a line over `max_row_chars`
    or not JSON refused in one line naming the file and the line."""
    with open(path, encoding="utf-8-sig", errors="strict", newline="\n") as fh:
        try:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if len(line) > max_row_chars:
                    raise UserError(f"dataset {path}: row {no} has {len(line)} characters, over max_row_chars "
                                    f"{max_row_chars}; split or shorten it, or raise max_row_chars")
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"dataset {path}: line {no} is not valid JSON ({exc.msg})") from None
                yield no, value
        except UnicodeDecodeError:
            raise UserError(f"dataset {path}: not a UTF-8 text file") from None


def rows(dataset: Union[str, list[str]], max_row_chars: int = MAX_ROW_CHARS) -> Iterator[tuple[Path, int, dict]]:
    """(file, line number, row) for every row, lazily."""
    for path in jsonl_files(dataset):
        for no, row in jsonl_values(path, max_row_chars):
            if not isinstance(row, dict):
                raise UserError(f"dataset {path}: row {no} is a {type(row).__name__}, expected a JSON object")
            yield path, no, row
