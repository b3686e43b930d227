"""Artifact directories and their manifest, `swiftbox.json`.

A step writes into `<output>.partial/` (a stable name, so an interrupted run can resume from the
checkpoints in it) and the runner renames it to `<output>` only once the manifest is in place: a
directory named like a finished output always is one.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from swiftbox.errors import UserError

MANIFEST = "swiftbox.json"


def read_manifest(path: str | os.PathLike) -> dict | None:
    """The manifest of an artifact dir, or None if `path` is not one."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except RecursionError:
        raise UserError(f"{file}: unreadable manifest (nested too deeply)") from None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UserError(f"{file}: unreadable manifest ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{file}: unreadable manifest (expected a JSON object, got {type(data).__name__})")
    return data


def write_json_atomic(file: str | os.PathLike, data: Any) -> None:
    """Write JSON to a temp file beside `file`, fsync, rename: readers never see half a file."""
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(finite(data), fh, indent=2, sort_keys=False, default=str, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite(data: Any) -> Any:
    """JSON has no NaN/Infinity (strict parsers reject the bare tokens): such floats become the strings
    "nan" / "inf" / "-inf", so a manifest always parses and still says what was measured."""
    if isinstance(data, float) and not math.isfinite(data):
        return str(data)
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def prepare_output(output: Path, *, force: bool, resume: bool = False, owned: bool = False) -> Path:
    """Check `output` may be written and return the work dir to write into.

    `owned` outputs (the recipe's default runs/<name>/<step>) are replaced on a re-run; a user-chosen
    output that already exists needs `force`. The work dir is kept when resuming, else started empty.
    """
    if output.exists() and not (force or owned):
        if not output.is_dir() or any(output.iterdir()):
            raise UserError(f"output {output} already exists; pass force: true (--force) to replace it")
    work = partial_dir(output)
    if work.exists() and not resume:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    return work


def commit_output(work: Path, output: Path) -> None:
    """Move the finished work dir into place, replacing an old output only after the new one is complete."""
    old = None
    if output.exists():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        os.replace(output, old)
    os.replace(work, output)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def dir_size(path: str | os.PathLike) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").is_file()
