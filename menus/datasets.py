"""Dataset choices: the bundled files under recipes/data, or a path checked the moment it is typed.

The check is a cheap look at the file (exists, a supported extension, and for JSON lines a first row
in one of the formats the pipelines read); the pipeline does the full load when the step runs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "recipes" / "data"
BUNDLED_TEXT = ROOT / "swiftbox" / "assets" / "shakespeare.txt"     # raw text for pt (assets/README.md)
SUFFIXES = (".jsonl", ".json", ".parquet")

# the row shapes each step reads (any one key set is enough)
FORMATS = {
    "sft": [{"messages"}, {"conversations"}, {"instruction", "output"}, {"query", "response"}],
    "dpo": [{"prompt", "chosen", "rejected"}, {"messages", "rejected_response"}],
    "kto": [{"prompt", "completion", "label"}, {"messages", "label"}, {"conversations", "kto_tag"},
            {"conversations", "label"}, {"messages", "kto_tag"}],
    "eval": [{"messages"}, {"conversations"}, {"instruction", "output"}, {"query", "response"},
             {"question", "answer"}],
}


def display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    except ValueError:
        return str(path)


def bundled(kind: str) -> list[str]:
    """Bundled data files meant for a step kind (parity_sft.jsonl for sft, shakespeare.txt for pt, ...)."""
    if kind == "pt":
        return [display(BUNDLED_TEXT)] if BUNDLED_TEXT.is_file() else []
    files = sorted(BUNDLED.glob("*.jsonl")) if BUNDLED.is_dir() else []
    # the toy quickstart's task first (the menu's default model is the toy), then the real-model files
    mine = sorted((f for f in files if f.stem.endswith(kind)), key=lambda f: not f.stem.startswith("parity"))
    return [display(f) for f in mine]


def check(kind: str, raw: str) -> Union[bool, str]:
    """True, or one line saying what is wrong with the dataset path `raw` for step `kind`."""
    text = raw.strip()
    if kind == "pt":
        return _check_text(text)
    if not text:
        return "type a path to a .jsonl, .json or .parquet file"
    path = Path(text.split("#", 1)[0]).expanduser()
    if not path.exists():
        return f"{path}: no such file"
    if not path.is_file():
        return f"{path}: not a file"
    if path.suffix not in SUFFIXES:
        return f"{path}: expected {', '.join(SUFFIXES)}"
    if path.suffix != ".jsonl":
        return True
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), None)
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: unreadable ({exc.__class__.__name__})"
    if first is None:
        return f"{path}: the file is empty"
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return f"{path}: line 1 is not JSON"
    if not isinstance(row, dict):
        return f"{path}: line 1 is not a JSON object"
    shapes = FORMATS.get(kind)
    if shapes and not any(shape <= row.keys() for shape in shapes):
        wanted = " | ".join("/".join(sorted(s)) for s in shapes)
        return f"{path}: columns {sorted(row)} do not fit {kind}; expected {wanted}"
    return True


def _check_text(text: str) -> Union[bool, str]:
    """pt's raw text: a .txt / .jsonl file or a directory of them (swiftbox.data.texts reads it)."""
    from swiftbox.data import text_files
    from swiftbox.errors import UserError

    if not text:
        return "type a path to a .txt or .jsonl file, or a directory of them"
    try:
        text_files(text)
    except UserError as exc:
        return str(exc)
    return True
