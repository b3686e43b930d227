"""Artifact directories and their manifest, `swiftbox.json`.

A step writes into `<output>.partial/` (a stable name, so an interrupted run can resume from the
checkpoints in it) and the runner renames it to `<output>` only once the manifest is in place: a
directory named like a finished output always is one.

swiftbox deletes only what swiftbox wrote: `--force` and a recipe's default output replace a directory holding a
manifest a swiftbox run wrote (versioned `swiftbox_manifest` with the fields every run writes: kind, config,
versions, timings.started - a user's own `swiftbox.json`, even `{}`, is not one), or an empty one; a work dir is
wiped only when it carries swiftbox's mark (`PARTIAL_MARK`, written when it is made).
Anything else in the way is exit 2 naming it, with every file left where it was.
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
PARTIAL_MARK = ".swiftbox-partial"      # inside <output>.partial/: swiftbox made this work dir


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


def lineage(ref: str) -> list[dict]:
    """Manifests from the artifact dir `ref` back to the first artifact (nearest first; [] for a hub name)."""
    out: list[dict] = []
    seen: set[str] = set()
    current: str | None = ref
    while current and Path(current).is_dir() and current not in seen:
        seen.add(current)
        manifest = read_manifest(current)
        if manifest is None:
            break
        out.append(manifest)
        current = manifest.get("input")
    return out


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


# what the runner writes into every step's manifest (runner._manifest): a file with the name but not these is not
# proof that swiftbox wrote the directory (`{}` or someone's own swiftbox.json)
MANIFEST_VERSIONS = (1,)
MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {"kind": str, "versions": dict, "timings": dict,
                                                       "config": dict}


def manifest_problem(data: dict) -> str | None:
    """Why a parsed swiftbox.json is not one a swiftbox run wrote (None when it is)."""
    version = data.get("swiftbox_manifest")
    if isinstance(version, bool) or version not in MANIFEST_VERSIONS:
        return f"its swiftbox_manifest is {version!r}, not one of {list(MANIFEST_VERSIONS)}"
    wrong = [key for key, kind in MANIFEST_FIELDS.items() if not isinstance(data.get(key), kind)]
    if wrong:
        return f"it lacks the field(s) a run writes: {', '.join(wrong)}"
    if not isinstance(data["timings"].get("started"), str):
        return "it lacks the field(s) a run writes: timings.started"
    return None


def ownership_problem(path: Path) -> str | None:
    """Why swiftbox may not replace directory `path` (None: it is empty or holds a manifest a swiftbox run wrote)."""
    if not path.is_dir():
        return "it is not a directory"
    if (path / MANIFEST).is_file():
        try:
            data = read_manifest(path)
        except UserError as exc:   # a swiftbox.json that is not ours (or is broken): not proof enough to delete
            return str(exc).split(": ", 1)[-1]
        return manifest_problem(data) if data is not None else f"no {MANIFEST} in it"
    return None if not any(path.iterdir()) else f"no {MANIFEST} in it"


def is_swiftbox_output(path: Path) -> bool:
    """A directory swiftbox may replace: it holds a manifest a swiftbox run wrote, or nothing at all."""
    return ownership_problem(path) is None


def check_replaceable(output: Path) -> None:
    """Exit 2 unless `output` is absent, empty, or a swiftbox output: the only things swiftbox replaces."""
    if not os.path.lexists(output):
        return
    if output.is_symlink() or not output.is_dir():
        kind = "a symlink" if output.is_symlink() else "not a directory"
        raise UserError(f"output {output} exists and is {kind}; swiftbox replaces only its own output directories, "
                        "so choose another output or move it away")
    why = ownership_problem(output)
    if why is not None:
        raise UserError(f"output {output} is not a swiftbox output ({why}) and is not empty; swiftbox would delete "
                        f"{_listing(output)}; it replaces only its own outputs, even with --force: choose another "
                        "output or move its files away")


def _listing(path: Path, most: int = 3) -> str:
    """What replacing `path` would delete, in a few words: '2 files (a.txt, b/...)'."""
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    except OSError:
        return "its contents"
    shown = ", ".join(names[:most]) + (", ..." if len(names) > most else "")
    return f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} ({shown})"


def check_summary_replaceable(file: Path) -> None:
    """A run's summary.json is rewritten after every step: refuse (exit 2) when the file there is not one of ours."""
    if not os.path.lexists(file):
        return
    try:
        data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() and not file.is_symlink() else None
    except (OSError, ValueError, RecursionError):
        data = None
    if not (isinstance(data, dict) and "recipe" in data and isinstance(data.get("steps"), list)):
        raise UserError(f"{file} exists and is not a swiftbox run summary; swiftbox writes the run's summary there, "
                        "so choose another output_dir (or --runs-root) or move the file away")


def prepare_output(output: Path, *, force: bool, resume: bool = False, owned: bool = False) -> Path:
    """Check `output` may be written and return the work dir to write into.

    `owned` outputs (the recipe's default runs/<name>/<step>) are replaced on a re-run; a user-chosen
    output that already exists needs `force`. Either way only a swiftbox output (or an empty directory) is
    ever replaced. The work dir is kept when resuming, else started empty.
    """
    check_replaceable(output)
    if output.exists() and not (force or owned) and any(output.iterdir()):
        raise UserError(f"output {output} already exists; pass force: true (--force) to replace it")
    work = partial_dir(output)
    if os.path.lexists(work) and not resume:
        if work.is_symlink() or not work.is_dir() or not ((work / PARTIAL_MARK).is_file() or not any(work.iterdir())):
            raise UserError(f"{work} exists and swiftbox did not make it (no {PARTIAL_MARK} in it); swiftbox writes "
                            f"{output} through it, so move it away or choose another output")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / PARTIAL_MARK).touch()
    return work


def discard_empty_work(work: Path) -> None:
    """Remove a failed step's work dir if it holds nothing but swiftbox's mark."""
    try:
        if {p.name for p in work.iterdir()} <= {PARTIAL_MARK}:
            (work / PARTIAL_MARK).unlink(missing_ok=True)
            work.rmdir()
    except OSError:
        pass


def commit_output(work: Path, output: Path) -> None:
    """Move the finished work dir into place, replacing an old output only after the new one is complete (and
    only if it is still a swiftbox output: the check is repeated, as the run may have taken hours)."""
    check_replaceable(output)
    (work / PARTIAL_MARK).unlink(missing_ok=True)
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
    from swiftbox.modeling.adapter_file import is_adapter_dir as marked

    return marked(path)
