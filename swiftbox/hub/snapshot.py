"""Hub snapshots: `download_snapshot()` and `fetch()` turn a model reference into a local directory, from cache
whenever possible.

References: `toy`, a local directory, a preset alias (`qwen2.5-0.5b-instruct`, see swiftbox.catalog.presets), a
ModelScope id (`Qwen/Qwen2.5-0.5B-Instruct`, the default hub), `hf:ORG/NAME` (or `source: hf`), `ms:ORG/NAME`.

Flow for a hub model (swiftbox.hub.clients does the hub-specific parts):
  1. probe: one metadata request (fast failure when the hub is unreachable: one line, exit 2);
  2. cache hit: our record of an earlier download says the same files (path, size, sha256, commit) are
     intact in the hub cache -> nothing is fetched, nothing is re-hashed;
  3. otherwise the hub's own snapshot_download fetches into its own cache (resume, retries, locking);
     sha256 is checked against the hub's listing (ModelScope's client does it; for Hugging Face we do);
  4. a small record is written beside the cache: `<cache>/.swiftbox/<hub>/<org>--<name>@<revision>.json`.

`fetch(ref)` (what every pipeline's input goes through, via swiftbox.hub.resolve_model) trusts a valid
record without touching the network, so a model downloaded once is usable offline; the download step
itself always asks the hub (it is the explicit refresh) and falls back to the record when the hub cannot
be reached. SWIFTBOX_OFFLINE=1 (or HF_HUB_OFFLINE=1 for Hugging Face) never contacts a hub.

Only safetensors weights are fetched by default: pickle formats (*.bin, *.pt, ...) need allow_pickle,
and other frameworks' weights (*.h5, *.msgpack, *.gguf, ...) are skipped unless `include` is given.
The step's output links to the cache instead of copying gigabytes (see `link` and docs/models.md).
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from swiftbox.errors import SwiftboxError, UserError

PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle"]
FOREIGN_PATTERNS = ["*.h5", "*.msgpack", "*.ot", "*.onnx", "*.onnx_data", "*.gguf", "*.tflite", "*.mlmodel"]
COPY_BELOW_BYTES = 16 << 20  # link: auto copies small files (configs, tokenizers) and links the weights
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_PREFIXES = {"hf:": "hf", "ms:": "modelscope", "modelscope:": "modelscope"}


@dataclass
class Snapshot:
    path: Path                    # the hub cache's snapshot directory
    source: str                   # modelscope | hf
    repo_id: str
    revision: str
    commit: Optional[str]
    endpoint: str
    files: list[dict] = field(default_factory=list)   # [{path, size, sha256}] of the selected files
    cache_hit: bool = False
    offline: bool = False


# -- references and patterns --------------------------------------------------------------------------
def parse_ref(ref: str, source: str = "auto") -> tuple[str, str]:
    """(hub, repo_id) for a hub reference; presets map to the chosen hub's id."""
    from swiftbox.catalog.presets import close_matches, find

    text, hub = ref.strip(), None
    for prefix, name in HUB_PREFIXES.items():
        if text.lower().startswith(prefix):
            text, hub = text[len(prefix):].strip(), name
    if source in ("hf", "modelscope"):
        if hub and hub != source:
            raise UserError(f"model {ref!r}: the {hub} prefix contradicts source: {source}; drop one of them")
        hub = source
    hub = hub or "modelscope"
    preset = find(text)
    if preset is not None:
        return hub, preset.hub_id(hub)
    if not HUB_ID.match(text):
        matches = close_matches(text)
        hint = f"; did you mean {' or '.join(matches)}?" if matches else ""
        raise UserError(f"model {ref!r}: not a preset, a hub id (ORG/NAME), hf:ORG/NAME, an existing local "
                        f"directory or toy{hint} (presets: ./launch.sh models)")
    return hub, text


def patterns(include: Optional[list[str]], exclude: Optional[list[str]], allow_pickle: bool):
    """(allow, ignore) glob lists handed to the hub client and used for our own selection."""
    ignore = list(exclude or [])
    if not allow_pickle:
        ignore += PICKLE_PATTERNS
    if not include:
        ignore += FOREIGN_PATTERNS
    return (list(include) if include else None), ignore


def select(files, allow: Optional[list[str]], ignore: list[str]):
    def hit(path, pats):
        return any(fnmatch.fnmatch(path, p) for p in pats)

    return [f for f in files if (allow is None or hit(f.path, allow)) and not hit(f.path, ignore)]


def _check_selection(listing, chosen, allow_pickle: bool) -> None:
    if not chosen:
        raise UserError(f"{listing.repo_id}: no files match the include/exclude patterns "
                        f"({len(listing.files)} files in the repo)")
    has_weights = any(f.path.endswith(".safetensors") for f in chosen)
    pickles = [f.path for f in listing.files if any(fnmatch.fnmatch(f.path, p) for p in PICKLE_PATTERNS[:3])]
    if not has_weights and pickles and not allow_pickle:
        raise UserError(f"{listing.repo_id} ships only pickle weights ({pickles[0]}, ...); pass --allow-pickle "
                        "(allow_pickle: true) to fetch them - loading a pickle can run code, so trust the repo first")


# -- records of finished downloads ----------------------------------------------------------------------
def _record_file(cache_dir: Path, hub: str, repo_id: str, revision: str) -> Path:
    return cache_dir / ".swiftbox" / hub / f"{repo_id.replace('/', '--')}@{revision}.json"


def _read_record(file: Path) -> Optional[dict]:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        return None


def _intact(record: dict, wanted: Optional[set] = None, strict: bool = False) -> bool:
    """Files of the record still on disk with their size (and, strict, their mtime: not touched since)."""
    root = Path(record.get("path", ""))
    for entry in record.get("files", []):
        if wanted is not None and entry["path"] not in wanted:
            continue
        try:
            st = (root / entry["path"]).stat()
        except OSError:
            return False
        if entry.get("size") is not None and st.st_size != entry["size"]:
            return False
        if strict and entry.get("mtime_ns") is not None and st.st_mtime_ns != entry["mtime_ns"]:
            return False
    return root.is_dir()


def _unchanged(record: dict, commit: Optional[str], wanted: list[dict]) -> bool:
    """The hub lists the same commit and files as recorded, and those files were not touched since."""
    known = {(e["path"], e.get("size"), e.get("sha256")) for e in record.get("files", [])}
    return (record.get("commit") == commit and all((w["path"], w["size"], w["sha256"]) in known for w in wanted)
            and _intact(record, {w["path"] for w in wanted}, strict=True))


def _snapshot_from_record(record: dict, *, offline: bool) -> Snapshot:
    files = [{k: e.get(k) for k in ("path", "size", "sha256")} for e in record["files"]]
    return Snapshot(Path(record["path"]), record["source"], record["repo_id"], record["revision"],
                    record.get("commit"), record.get("endpoint", ""), files, cache_hit=True, offline=offline)


def _write_record(file: Path, snap: Snapshot) -> None:
    from swiftbox.artifacts import write_json_atomic

    files = []
    for entry in snap.files:
        st = (snap.path / entry["path"]).stat()
        files.append({**entry, "mtime_ns": st.st_mtime_ns})
    write_json_atomic(file, {"source": snap.source, "repo_id": snap.repo_id, "revision": snap.revision,
                             "commit": snap.commit, "endpoint": snap.endpoint, "path": str(snap.path),
                             "files": files, "downloaded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


# -- the download -------------------------------------------------------------------------------------------
def offline(hub: str) -> bool:
    """SWIFTBOX_OFFLINE (or, for Hugging Face, HF_HUB_OFFLINE) is set: no hub is contacted."""
    flags = ["SWIFTBOX_OFFLINE"] + (["HF_HUB_OFFLINE"] if hub == "hf" else [])
    return any(os.environ.get(f, "").strip().lower() in ("1", "true", "yes", "on") for f in flags)


_offline = offline


def cached_snapshot(ref: str, revision: Optional[str] = None) -> Optional[Path]:
    """The intact earlier download of hub reference `ref` from either hub (ModelScope first), or None.
    Never touches the network."""
    from swiftbox.hub.clients import HUBS

    for hub_key in ("modelscope", "hf"):
        try:
            _, repo_id = parse_ref(ref, hub_key)
        except UserError:
            return None
        hub = HUBS[hub_key]
        record = _read_record(_record_file(hub.cache_dir(None), hub_key, repo_id, revision or hub.default_revision))
        if record is not None and _intact(record):
            return Path(record["path"])
    return None


def download_snapshot(ref: str, *, source: str = "auto", revision: Optional[str] = None,
                      include: Optional[list[str]] = None, exclude: Optional[list[str]] = None,
                      allow_pickle: bool = False, cache_dir: Optional[str] = None, refresh: bool = True) -> Snapshot:
    """Make `ref` available in the hub cache; `refresh=False` trusts an intact earlier download (no network)."""
    from swiftbox.hub.clients import HUBS, HubNoAnswer, HubUnreachable, sha256_file

    hub_key, repo_id = parse_ref(ref, source)
    hub = HUBS[hub_key]
    rev = revision or hub.default_revision
    cache = hub.cache_dir(cache_dir)
    record_file = _record_file(cache, hub_key, repo_id, rev)
    record = _read_record(record_file)
    usable = record if record is not None and _intact(record) else None   # an intact earlier download
    if usable is not None and (not refresh or _offline(hub_key)):
        return _snapshot_from_record(usable, offline=_offline(hub_key))
    if _offline(hub_key):
        raise UserError(f"offline mode (SWIFTBOX_OFFLINE / HF_HUB_OFFLINE) and {hub.label} model {repo_id}@{rev} is "
                        f"not in the cache {cache}; download it once with a network, or pass a local directory")
    try:
        listing = hub.probe(repo_id, revision)
    except (HubUnreachable, HubNoAnswer) as exc:
        if usable is None:
            raise
        print(f"swiftbox: {str(exc).split(';')[0]}; using the copy downloaded {usable.get('downloaded', '')}",
              file=sys.stderr)
        return _snapshot_from_record(usable, offline=True)
    allow, ignore = patterns(include, exclude, allow_pickle)
    chosen = select(listing.files, allow, ignore)
    _check_selection(listing, chosen, allow_pickle)
    wanted = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in chosen]
    if usable is not None and _unchanged(usable, listing.commit, wanted):  # cache hit: no transfer, no hashing
        snap = _snapshot_from_record(usable, offline=False)
        snap.files = wanted
        return snap
    path = hub.snapshot(listing, allow=allow, ignore=ignore, cache_dir=cache)
    previously = {(e["path"], e.get("size"), e.get("sha256"), e.get("mtime_ns"))
                  for e in (record or {}).get("files", [])}
    for entry in wanted:
        _verify(hub, repo_id, path / entry["path"], entry, previously, sha256_file)
    snap = Snapshot(path, hub_key, repo_id, rev, listing.commit, listing.endpoint, wanted)
    _write_record(record_file, snap)
    return snap


def _verify(hub, repo_id: str, file: Path, entry: dict, previously: set, sha256_file) -> None:
    """Size always; sha256 when the hub gave one, its client did not check it, and this exact file was not
    verified before (so a cache hit never re-hashes gigabytes)."""
    try:
        st = file.stat()
    except OSError:
        raise SwiftboxError(f"{hub.label} download of {repo_id} is missing {entry['path']} after the client "
                            "finished; run the same command again") from None
    bad = None
    if entry["size"] is not None and st.st_size != entry["size"]:
        bad = f"{st.st_size} bytes instead of {entry['size']}"
    elif (entry["sha256"] and not hub.client_checks_sha256
          and (entry["path"], entry["size"], entry["sha256"], st.st_mtime_ns) not in previously):
        got = sha256_file(file)
        if got != entry["sha256"].lower():
            bad = f"sha256 {got[:12]}... instead of {entry['sha256'][:12]}..."
    if bad:
        real = Path(os.path.realpath(file))
        file.unlink(missing_ok=True)
        real.unlink(missing_ok=True)
        raise SwiftboxError(f"{hub.label} served {entry['path']} of {repo_id} with the wrong content ({bad}); the bad "
                            "copy was deleted - run again, or use another mirror / --source")


def fetch(ref: str, revision: Optional[str] = None) -> Path:
    """A local directory holding hub model `ref`: a cached download if intact (no network), else downloaded."""
    return download_snapshot(ref, revision=revision, refresh=False).path


# -- the step -----------------------------------------------------------------------------------------------
def link_files(src: Path, rel_paths: list[str], dst: Path, mode: str = "auto") -> dict[str, int]:
    """Populate dst with src's files: copies, hard links or symlinks (see DownloadStep.link)."""
    used = {"copy": 0, "hardlink": 0, "symlink": 0}
    for rel in rel_paths:
        source, target = Path(os.path.realpath(src / rel)), dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        how = mode
        if mode == "auto":
            how = "copy" if source.stat().st_size < COPY_BELOW_BYTES else "hardlink"
        if how == "hardlink":
            try:
                os.link(source, target)
            except OSError:  # another filesystem, or links not allowed: point at the cache instead
                how = "symlink"
        if how == "symlink":
            os.symlink(source, target)
        elif how == "copy":
            shutil.copy2(source, target)
        used[how] += 1
    return {k: v for k, v in used.items() if v}


def _top_files(path: Path) -> list[str]:
    """A model directory's own files (not its manifest, not checkpoint sub-directories)."""
    return sorted(p.name for p in path.iterdir() if p.is_file() and p.name != "swiftbox.json")


def _local_files(path: Path, allow_pickle: bool) -> list[str]:
    from swiftbox.hub.local import check_local_model

    check_local_model(path)
    files = _top_files(path)
    weights = [f for f in files if f.endswith(".safetensors")]
    pickles = [f for f in files if any(fnmatch.fnmatch(f, p) for p in PICKLE_PATTERNS[:3])]
    if not weights and pickles and not allow_pickle:
        raise UserError(f"{path}: holds only pickle weights ({pickles[0]}); pass --allow-pickle to use them")
    if not weights and not pickles:
        raise UserError(f"{path}: holds no weights (*.safetensors); expected a model or adapter directory")
    return [f for f in files if allow_pickle or f not in pickles]
