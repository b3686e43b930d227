"""What a step started from, recorded in its manifest so `compare` can check two runs: the environment
variables that matter, thread count, random seeds, each dataset file's content hash / rows / columns, and
the initial weights' hash.

Weight files are hashed once per (path, size, mtime) and remembered under $SWIFTBOX_CACHE/hashes.json, so a
re-run on a large local model costs a stat. Hub ids are not fetched here: their weights are hashed where
they are local (run the download step first, or pass the directory).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

DATA_FIELDS = ("dataset", "eval_dataset", "perplexity", "probe")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def step_fingerprint(cfg, model_ref: Optional[str]) -> dict[str, Any]:
    """The manifest fields describing a step's inputs. Never raises: a part that fails records its error."""
    from swiftbox.device.base import relevant_env

    config = cfg.model_dump(mode="json")
    out: dict[str, Any] = {"env": relevant_env(), "seeds": {k: v for k, v in config.items() if "seed" in k}}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["threads"] = torch.get_num_threads()
    out["data"] = {}
    for name in DATA_FIELDS:
        value = config.get(name)
        if value:
            out["data"][name] = [_safe(dataset_fingerprint, spec) for spec in ([value] if isinstance(value, str)
                                                                                  else value)]
    if model_ref:
        out["initial_weights"] = _safe(weights_fingerprint, model_ref)
    return out


def _safe(fn, arg) -> dict:
    try:
        return fn(arg)
    except Exception as exc:  # a fingerprint must never fail a finished step
        return {"ref": str(arg), "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def dataset_fingerprint(spec: str) -> dict:
    from swiftbox.data import read_file, split_spec

    path, sample = split_spec(spec)
    info: dict[str, Any] = {"ref": spec, "sample": sample}
    if path.is_dir():   # pt reads directories of .txt / .jsonl
        return {**info, "files": [dataset_fingerprint(str(p)) for p in sorted(path.iterdir()) if p.is_file()]}
    if not path.is_file():
        return {**info, "error": "not a file"}
    columns: list[str] = []
    if path.suffix.lower() in (".json", ".parquet"):
        rows = read_file(path)
        count = len(rows)
        columns = sorted({k for row in rows[:200] if isinstance(row, dict) for k in row})
    else:  # jsonl and plain text, read line by line (a streamed dataset may be larger than memory)
        count, seen = 0, set()
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                count += 1
                if path.suffix.lower() == ".jsonl" and count <= 200:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    seen |= set(row) if isinstance(row, dict) else set()
        columns = sorted(seen)
    return {**info, "sha256": file_sha256(path), "bytes": path.stat().st_size, "rows": count, "columns": columns}


def weights_fingerprint(ref: str) -> dict:
    from swiftbox.hub.resolve import resolve_model, resolves_without_network

    if not resolves_without_network(ref):
        return {"ref": ref, "error": "hub id: not hashed (download it first, or pass its directory)"}
    root = resolve_model(ref)
    files = sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.name}:{file_sha256(file)}\n".encode())
    return {"ref": ref, "sha256": digest.hexdigest() if files else None, "files": [f.name for f in files],
            "bytes": sum(f.stat().st_size for f in files)}


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (real path, size, mtime) in the swiftbox cache."""
    from swiftbox.catalog.toy import cache_root
    from swiftbox.hub.clients import sha256_file

    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    store = cache_root() / "hashes.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    if key in known:
        return known[key]
    value = sha256_file(path)
    if st.st_size >= 1 << 20:  # small files are cheaper to hash than to remember
        known[key] = value
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            tmp = store.with_name(f".hashes.{os.getpid()}.json")
            tmp.write_text(json.dumps(known))
            os.replace(tmp, store)
        except OSError:
            pass
    return value
