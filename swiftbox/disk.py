"""A full disk, said in one line: "no space left on DEVICE while writing X" (exit 1).

The libraries report it each their own way: Python's `OSError(ENOSPC)`, safetensors' "I/O error: No space left on
device (os error 28)", torch.save's "[enforce fail at inline_container.cc] unexpected pos ..." (no errno at all,
so a filesystem with next to nothing free left after the failure counts too). `no_space` recognises them;
`full_disk_error` builds the one line, naming the filesystem (device and mount point) and what was being written.
The filesystem named is the one that is full: the file the error names, else the one of the places a step writes
(the output, the temp dir, the swiftbox / Hugging Face caches) that has next to nothing free - the output's own
filesystem may have plenty while a library's temp file filled /tmp.
"""
from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from swiftbox.errors import SwiftboxError

NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
NO_SPACE_WORDS = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122", "storagefull")
NEARLY_FULL = 1 << 20          # bytes free at most on a filesystem that a failed write just filled


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[Optional[BaseException]] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def free_bytes(path: str | os.PathLike) -> Optional[int]:
    """Bytes this process may still write on the filesystem holding `path` (its nearest existing parent)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except (OSError, AttributeError):          # no statvfs (Windows) or the path vanished
        return None
    blocks = st.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else st.f_bavail   # root may use the reserve
    return blocks * st.f_frsize


def no_space(exc: BaseException, where: Optional[str | os.PathLike] = None) -> bool:
    """Did `exc` come from a full disk (or a quota)? `where`: the directory being written, checked for free space
    when the error itself does not say (torch.save)."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS:
            return True
        if any(word in str(e).lower() for word in NO_SPACE_WORDS):
            return True
    if where is not None and isinstance(exc, (OSError, RuntimeError)):
        free = free_bytes(where)
        return free is not None and free < NEARLY_FULL
    return False


def filesystem(path: str | os.PathLike) -> tuple[str, str]:
    """(device, mount point) of the filesystem holding `path`, from /proc/mounts where there is one."""
    real = os.path.realpath(path)
    best = ("", "")
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 2:
                    continue
                device, mount = _unescape(fields[0]), _unescape(fields[1])
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[1]):
                    best = (device, mount)
    except OSError:
        pass
    if best[1]:
        return best
    top = Path(real)
    while not os.path.ismount(top) and top != top.parent:
        top = top.parent
    return (str(top), str(top))


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash in a path as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _scratch_places() -> list[str]:
    """Where libraries write besides the output: the temp dir and the model / dataset caches."""
    places = [tempfile.gettempdir()]
    for var in ("SWIFTBOX_CACHE", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "MODELSCOPE_CACHE", "XDG_CACHE_HOME"):
        if os.environ.get(var):
            places.append(os.environ[var])
    places.append(os.path.expanduser("~/.cache"))
    return places


def full_place(exc: BaseException, writing: str | os.PathLike) -> str:
    """The path whose filesystem is full: the file the error names; else `writing` when its filesystem has next to
    nothing free; else the first of the scratch places that has; else `writing` (a quota: nothing looks full)."""
    named = written_file(exc)
    if named is not None:
        return named
    for place in (str(writing), *_scratch_places()):
        free = free_bytes(place)
        if free is not None and free < NEARLY_FULL:
            return place
    return str(writing)


def shown(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when it is inside it, else as it is."""
    text = os.path.abspath(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:                         # another drive (Windows)
        return text
    return text if rel.startswith("..") else rel


def written_file(exc: BaseException) -> Optional[str]:
    for e in _chain(exc):
        if isinstance(e, OSError) and e.filename:
            return str(e.filename)
    return None


def full_disk_error(exc: BaseException, writing: str | os.PathLike, note: str = "") -> SwiftboxError:
    """The one line for a full disk while writing `writing` (the file named by the error, when it names one)."""
    target = full_place(exc, writing)
    device, mount = filesystem(target)
    where = device if device == mount else f"{device} ({mount})"
    return SwiftboxError(f"no space left on {where} while writing {shown(target)}" + (f"; {note}" if note else ""))
