"""Reading dataset files: jsonl / json / parquet, one spec or a list, `path#N` sampling.

Robust to what real files hold: a UTF-8 BOM, U+2028/U+2029 inside JSON strings (lines are split on '\\n'
only, never with str.splitlines), a '#' in a real file name (`a#3.jsonl` is that file; `a.jsonl#3` samples 3
rows when `a.jsonl#3` itself does not exist). A row larger than `max_row_chars` is refused before anything
tokenizes it, and a lone surrogate (invalid Unicode that cannot be encoded) is a one-line error naming the
file and row - both exit 2. A file that takes a while prints progress lines (data/progress.py).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Optional, Union

from swiftbox.data.progress import each
from swiftbox.errors import UserError

MAX_ROW_CHARS = 1_000_000


def split_spec(spec: str) -> tuple[Path, Optional[int]]:
    """'data.jsonl#200' -> (Path('data.jsonl'), 200); no '#N' (or a file really named so) -> (path, None)."""
    path = Path(spec).expanduser()
    if "#" not in spec or path.exists():
        return path, None
    head, _, tail = spec.rpartition("#")
    if not tail.isdigit() or int(tail) < 1:
        raise UserError(f"dataset {spec!r}: expected PATH#N with N a positive integer (or an existing file)")
    return Path(head).expanduser(), int(tail)


def read_file(path: Path, max_row_chars: int = MAX_ROW_CHARS) -> list[dict]:
    """Rows of one jsonl / json / parquet file as dicts."""
    if not path.is_file():
        raise UserError(f"dataset {path}: file not found; expected a .jsonl, .json or .parquet file")
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - any reader failure is bad input
            raise UserError(f"dataset {path}: unreadable parquet ({str(exc).splitlines()[0]})") from None
        for no, row in enumerate(each(rows, f"reading {path}"), 1):
            _check_row(path, no, json.dumps(row, ensure_ascii=False, default=str), max_row_chars)
    else:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError:
            raise UserError(f"dataset {path}: not a UTF-8 text file") from None
        rows = _parse_json_text(path, text, max_row_chars)
    if not rows:
        raise UserError(f"dataset {path}: holds no rows")
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise UserError(f"dataset {path}: row {i} is a {type(row).__name__}, expected a JSON object")
    return rows


def _check_row(path: Path, no: int, line: str, max_row_chars: int) -> None:
    if len(line) > max_row_chars:
        raise UserError(f"dataset {path}: row {no} has {len(line)} characters, over max_row_chars {max_row_chars}; "
                        f"split or shorten it, or raise max_row_chars")


def _parse_json_text(path: Path, text: str, max_row_chars: int) -> list:
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset {path}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
        for no, row in enumerate(each(data if isinstance(data, list) else [], f"reading {path}"), 1):
            _check_row(path, no, json.dumps(row, ensure_ascii=False), max_row_chars)
            _check_text(path, no, row)
        return data
    rows = []
    lines = text.split("\n")
    if lines and not lines[-1].strip():
        lines.pop()                     # the newline that ends the last row
    for no, line in enumerate(each(lines, f"reading {path}"), 1):
        if not line.strip():
            continue
        _check_row(path, no, line, max_row_chars)
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset {path}: line {no} is not valid JSON ({exc.msg})") from None
        if "\\ud" in line.lower():
            _check_text(path, no, row)
        rows.append(row)
    return rows


def _check_text(path: Path, no: int, row) -> None:
    """JSON may spell a lone surrogate (\\ud800); no tokenizer can encode it."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"dataset {path}: line {no} holds invalid Unicode (a lone surrogate such as \\ud800); "
                        f"fix the text encoding of that row") from None


def read_rows(dataset: Union[str, list[str]], seed: int = 42,
              max_row_chars: int = MAX_ROW_CHARS) -> list[tuple[Path, int, dict]]:
    """All rows of `dataset` (one spec or a list), each with its file and row number. 'path#N' samples N rows
    (with repetition when N exceeds the file), deterministically from `seed`."""
    specs = [dataset] if isinstance(dataset, str) else list(dataset)
    if not specs:
        raise UserError("dataset: expected a path or a list of paths, got an empty list")
    out: list[tuple[Path, int, dict]] = []
    rng = random.Random(seed)
    for spec in specs:
        if not isinstance(spec, str):
            raise UserError(f"dataset: expected a path string, got {spec!r}")
        path, count = split_spec(spec)
        rows = list(enumerate(read_file(path, max_row_chars), 1))
        if count is not None:
            picked = rows * (count // len(rows)) + rng.sample(rows, count % len(rows))
            rows = picked if count >= len(rows) else rng.sample(rows, count)
        out += [(path, no, row) for no, row in rows]
    return out
