"""GGUF import: a local `.gguf` file (or a directory holding exactly one) is a model reference like any other.

People who have only a GGUF (Ollama's blobs, LM Studio's downloads, a wheel that carries one) can fine-tune it:
`./launch.sh sft model.gguf ...`, `gguf:PATH` anywhere a model is taken, `./launch.sh download gguf:PATH --out DIR`.

The file is converted ONCE into a plain safetensors model directory in the swiftbox cache,
`$SWIFTBOX_CACHE/gguf/<sha256[:16]>/`, keyed by the file's content:

    config.json             transformers' config read from the GGUF metadata (without its `quantization_config`:
                            the directory holds ordinary float weights)
    model.safetensors       every tensor dequantized to float32 (transformers reads the GGUF with the `gguf`
                            package; a model loaded that way cannot be saved, so a plain model is built from its
                            config and given the state dict; tied embeddings stay tied)
    tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json
    swiftbox.json           the record: kind gguf-import, the file's sha256 and size, architecture, and how many
                            tensors of each GGML type it held (gguf's GGUFReader) - dequantized weights are the
                            quantized file's values, not the original release's

The conversion is written into a temporary directory beside the target and renamed into place, so a killed
conversion leaves nothing under the final name. The file's sha256 is remembered by (path, size, mtime), so a
second resolve neither re-hashes nor re-converts; a cached conversion is checked on every use against its record
(every file it wrote, with its size) and a damaged one is converted again, with one line saying so.

Before the file is hashed or handed to gguf / transformers, its header is read by a bounded reader
(gguf_header.py: magic first, every count and length capped and checked against the file's size) and checked
against itself (counts, layers, tokenizer). A tensor type transformers cannot dequantize, or an architecture it
cannot load, is bad input (exit 2) naming it, found before any conversion starts. The conversion proves what it
built: the tensors the model of that config needs (its state dict's keys, mapped to GGUF names with gguf's own
table, built on the meta device - nothing allocated) are exactly the file's tensors, shape for shape, so no weight
is left at its random initial value and none in the file is dropped.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Optional

from swiftbox.errors import SwiftboxError, UserError
from swiftbox.modeling.adapter_file import is_adapter_dir

PREFIX = "gguf:"
KIND = "gguf-import"
IMPORT_VERSION = 1        # bump when the converted directory's layout changes: older conversions are not reused


def cache_dir() -> Path:
    from swiftbox.catalog.toy import cache_root

    return cache_root() / "gguf"


# -- what a reference names -------------------------------------------------------------------------------
def strip_prefix(ref: str) -> Optional[str]:
    """The path of a `gguf:PATH` reference, or None for any other reference."""
    if ref[: len(PREFIX)].lower() != PREFIX:
        return None
    path = ref[len(PREFIX):].strip()
    if not path:
        raise UserError(f"model {ref!r}: expected gguf:PATH with a .gguf file or a directory holding one")
    return path


def gguf_file(path: Path, *, required: bool = False) -> Optional[Path]:
    """The GGUF file `path` names: `path` itself when it is a .gguf file; the one *.gguf of a directory that holds
    no config.json (a directory with a config.json is an ordinary model directory). None when `path` is neither,
    unless `required` (a `gguf:` reference), then exit 2. Two or more GGUF files in one directory: exit 2."""
    path = path.expanduser()
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return path
        if required or path.suffix.lower() in (".bin", ".safetensors"):
            raise UserError(f"{path}: not a .gguf file; expected a .gguf file or a directory holding one "
                            "(or a model directory with config.json)")
        return None
    if not path.is_dir() or (path / "config.json").is_file() or is_adapter_dir(path):
        if required:
            raise UserError(f"{path}: expected a .gguf file or a directory holding exactly one")
        return None
    found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == ".gguf")
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:4]) + (", ..." if len(found) > 4 else "")
        raise UserError(f"{path}: holds {len(found)} .gguf files ({names}); pass the one to use as the model "
                        "(a path to the .gguf file itself)")
    if found:
        return found[0]
    if required:
        raise UserError(f"{path}: holds no .gguf file")
    return None


# -- reading the file ---------------------------------------------------------------------------------------
def read_header(file: Path) -> dict[str, Any]:
    """Architecture, name and per-type tensor counts of a GGUF file, read by the bounded reader (gguf_header.py)
    and checked against itself; exit 2 naming the problem. Reads no weights."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise UserError("reading a .gguf file needs the python package 'gguf' (pip install gguf)") from None
    from swiftbox.hub import gguf_header

    header = gguf_header.read(file)
    types = Counter(t.type_name for t in header.tensors)
    name = header.meta.get("general.name")
    return {"architecture": header.architecture, "name": name if isinstance(name, str) else None,
            "tensors": len(header.tensors), "tensor_types": dict(sorted(types.items())),
            "by_tensor": {t.name: t.type_name for t in header.tensors}, "header": header}


def check_loadable(file: Path, header: dict[str, Any]) -> None:
    """Exit 2 naming the architecture or the GGML tensor type transformers cannot turn into float weights."""
    from swiftbox.compat import gguf_architectures, gguf_dequantizable_types

    arch = header.get("architecture")
    known = gguf_architectures()
    if not arch or arch not in known:
        raise UserError(f"{file}: GGUF architecture {arch!r} cannot be loaded by transformers "
                        f"(it reads {', '.join(sorted(known)[:12])}, ...)")
    usable = gguf_dequantizable_types(arch)
    bad = {t: n for t, n in header["tensor_types"].items() if t not in usable}
    if bad:
        kind, count = sorted(bad.items())[0]
        example = next(name for name, t in header["by_tensor"].items() if t == kind)
        raise UserError(f"{file}: GGUF tensor type {kind} ({count} tensor(s), e.g. {example}) cannot be dequantized by "
                        f"transformers; re-export the model with another type (e.g. Q8_0, Q4_K_M or F16)")


def sha256_of(file: Path) -> str:
    """The file's sha256, remembered by (real path, size, mtime) so a known file is hashed once."""
    from swiftbox.artifacts import write_json_atomic
    from swiftbox.hub.clients import sha256_file

    real = Path(os.path.realpath(file))
    st = real.stat()
    stamp = cache_dir() / "hashes" / f"{hashlib.sha256(str(real).encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(stamp.read_text())
        if (known.get("path"), known.get("size"), known.get("mtime_ns")) == (str(real), st.st_size, st.st_mtime_ns):
            return str(known["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = sha256_file(real)
    write_json_atomic(stamp, {"path": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest})
    return digest


# -- the conversion ----------------------------------------------------------------------------------------
def imported_dir(digest: str) -> Path:
    return cache_dir() / f"v{IMPORT_VERSION}-{digest[:16]}"


def is_complete(target: Path) -> bool:
    manifest = target / "swiftbox.json"
    return manifest.is_file() and (target / "config.json").is_file() and any(target.glob("*.safetensors"))


def damage(target: Path, digest: str) -> Optional[str]:
    """Why the cached conversion `target` cannot be used (None: it is whole): its record must parse, name this
    file's sha256, and list every file it wrote with the size it still has."""
    try:
        record = json.loads((target / "swiftbox.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return "its swiftbox.json is missing or unreadable"
    if not isinstance(record, dict) or record.get("kind") != KIND or \
            (record.get("gguf") or {}).get("sha256") != digest:
        return "its swiftbox.json is not this file's import record"
    files = record.get("files")
    if not isinstance(files, dict) or not files:     # made before the record listed its files
        return _legacy_damage(target)
    for name, size in files.items():
        path = target / str(name)
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, the conversion wrote {size}"
    return None


def _legacy_damage(target: Path) -> Optional[str]:
    """An older conversion (its record lists no files): its config parses and every safetensors file holds the
    bytes its own header says (a truncated or removed weights file is damage)."""
    import struct

    try:
        json.loads((target / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return "config.json is missing or unreadable"
    weights = sorted(target.glob("*.safetensors"))
    if not weights:
        return "model.safetensors is missing"
    for path in weights:
        try:
            size = path.stat().st_size
            with open(path, "rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                if length > min(size, 100 << 20):
                    return f"{path.name} is truncated"
                header = json.loads(fh.read(length))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
            return f"{path.name} is unreadable"
        if size != 8 + length + end:
            return f"{path.name} has {size} bytes, its header says {8 + length + end}"
    return None


def _discard(target: Path) -> None:
    """Move a damaged conversion out of the way (atomically), then delete it."""
    aside = target.with_name(f".damaged-{target.name}-{os.getpid()}")
    try:
        os.replace(target, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def import_gguf(file: Path, *, source: Optional[dict[str, Any]] = None, note: str = "") -> Path:
    """The cached safetensors directory converted from GGUF `file` (converted now if it is not there yet)."""
    file = Path(file).expanduser()
    if not file.is_file():
        raise UserError(f"{file}: no such .gguf file")
    from swiftbox.hub import gguf_header

    _check_magic(file)                     # 4 bytes, before a 4 GB file is hashed
    known = _known_digest(file)
    if known is not None and is_complete(imported_dir(known)) and damage(imported_dir(known), known) is None:
        return imported_dir(known)         # converted and intact: no header parse, no hash
    header = read_header(file)             # bounded, before anything else reads the file
    check_loadable(file, header)
    gguf_header.check_model(header["header"])
    check_tensors(file, header["header"], _config_of(file))     # the model it builds is the file's, or exit 2
    digest = sha256_of(file)
    target = imported_dir(digest)
    if target.exists():
        why = damage(target, digest)
        if why is None:
            return target
        print(f"swiftbox: the cached conversion of {file.name} at {target} is damaged ({why}); converting it again",
              file=sys.stderr, flush=True)
        _discard(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _drop_abandoned(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".partial-{target.name}-{os.getpid()}-", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())          # mkdtemp makes it private; the cache is shared like any other
    started = time.time()
    print(f"swiftbox: importing {file.name} ({header['architecture']}, {_types_line(header)}) once into "
          f"{target}", file=sys.stderr, flush=True)
    try:
        _convert(file, tmp)
        record = {"kind": KIND, "import_version": IMPORT_VERSION,
                  "gguf": {"file": file.name, "path": str(file.resolve()), "sha256": digest,
                           "size": file.stat().st_size, "architecture": header["architecture"],
                           "name": header["name"], "tensors": header["tensors"],
                           "tensor_types": header["tensor_types"]},
                  "dtype": "float32",
                  "note": note or ("weights dequantized from the GGUF's tensor types to float32: the quantized "
                                   "file's values, not the original full-precision release"),
                  "seconds": round(time.time() - started, 2), "versions": _versions(),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}}
        if source:
            record["source"] = source
        from swiftbox.artifacts import write_json_atomic

        write_json_atomic(tmp / "swiftbox.json", record)
        try:
            os.replace(tmp, target)
        except OSError:     # another process finished the same conversion first: theirs is identical
            if not is_complete(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_magic(file: Path) -> None:
    from swiftbox.hub.gguf_header import MAGIC

    try:
        with open(file, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise UserError(f"{file}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if magic != MAGIC:
        raise UserError(f"{file}: not a GGUF file (it starts with {magic!r}, a GGUF file with {MAGIC!r})")


def _known_digest(file: Path) -> Optional[str]:
    """The sha256 remembered for this (path, size, mtime), without hashing (None: not known)."""
    real = Path(os.path.realpath(file))
    st = real.stat()
    stamp = cache_dir() / "hashes" / f"{hashlib.sha256(str(real).encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(stamp.read_text())
        if (known.get("path"), known.get("size"), known.get("mtime_ns")) == (str(real), st.st_size, st.st_mtime_ns):
            return str(known["sha256"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    return None


def expected_tensors(config: Any, architecture: str) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> torch shape of every weight the model of `config` needs: its state dict's keys (built
    on the meta device: nothing allocated), mapped with gguf's own name table; exit 2 for a key it cannot map."""
    import torch
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    from transformers import AutoModelForCausalLM

    arch = {name: kind for kind, name in MODEL_ARCH_NAMES.items()}.get(architecture)
    if arch is None:
        raise UserError(f"GGUF architecture {architecture!r} has no tensor name table in gguf")
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    names = get_tensor_name_map(arch, int(config.num_hidden_layers))
    out: dict[str, tuple[int, ...]] = {}
    for key, value in skeleton.state_dict().items():
        if key == "lm_head.weight" and getattr(config, "tie_word_embeddings", False):
            continue                           # tied: the token embedding is the output layer
        mapped = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise UserError(f"{architecture}: swiftbox cannot tell which GGUF tensor holds the model's {key}, so it "
                            "cannot prove the import complete; convert the original model instead")
        out[mapped] = tuple(value.shape)
    return out


def check_tensors(file: Path, header: Any, config: Any) -> None:
    """The file's tensors are exactly the ones the model of `config` needs, shape for shape (exit 2 otherwise)."""
    wanted = expected_tensors(config, header.architecture)
    held = {t.name: t.shape for t in header.tensors}
    missing = sorted(set(wanted) - set(held))
    if missing:
        raise UserError(f"{file}: the GGUF lacks {len(missing)} tensor(s) a {header.architecture} model of this "
                        f"config needs ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); they would "
                        "keep random values")
    unused = sorted(set(held) - set(wanted))
    if unused:
        raise UserError(f"{file}: the GGUF holds {len(unused)} tensor(s) a {header.architecture} model does not use "
                        f"({', '.join(unused[:3])}{', ...' if len(unused) > 3 else ''}); they would be dropped - does "
                        "general.architecture name the model these tensors are from?")
    wrong = [(n, held[n], wanted[n]) for n in sorted(wanted) if tuple(held[n]) != wanted[n]]
    if wrong:
        name, got, want = wrong[0]
        raise UserError(f"{file}: tensor {name} has shape {list(got)}, the config's model needs {list(want)} "
                        f"({len(wrong)} tensor(s) differ)")


def _config_of(file: Path) -> Any:
    """transformers' config for the GGUF (metadata only; the header was bounded-read first)."""
    from transformers import AutoConfig

    try:
        with _quiet_bars():
            return AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name)
    except (ValueError, NotImplementedError, KeyError, IndexError, TypeError, ZeroDivisionError) as exc:
        raise UserError(f"{file}: transformers cannot read this GGUF's config ({type(exc).__name__}: "
                        f"{(str(exc).splitlines() or [''])[0][:200]})") from None


def _convert(file: Path, out: Path) -> None:
    """GGUF -> float32 safetensors + tokenizer + chat template + generation config, written into `out`."""
    import copy

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        folder, name = str(file.parent), file.name
        try:
            with _quiet_bars():
                tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
                loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        except (ValueError, NotImplementedError, KeyError, IndexError, TypeError, ZeroDivisionError) as exc:
            raise UserError(f"{file}: transformers cannot load this GGUF ({type(exc).__name__}: "
                            f"{(str(exc).splitlines() or [''])[0][:200]})") from None
        config = copy.deepcopy(loaded.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config        # the directory holds plain float weights
        config.dtype = "float32"
        state = {k: v.detach().to(torch.float32).contiguous() for k, v in loaded.state_dict().items()}
        del loaded
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        result = plain.load_state_dict(state, strict=False)
        tied = set(getattr(plain, "_tied_weights_keys", None) or {})
        missing = [k for k in result.missing_keys if k not in tied and not (config.tie_word_embeddings
                                                                          and k.startswith("lm_head."))]
        if missing or result.unexpected_keys:
            raise SwiftboxError(f"{file}: converting the GGUF left weights unset ({', '.join(missing[:3])}) or "
                                f"unused ({', '.join(result.unexpected_keys[:3])}); transformers' GGUF mapping does "
                                "not fit this model")
        if config.tie_word_embeddings:
            plain.tie_weights()
        plain.generation_config = GenerationConfig.from_model_config(config)
        plain.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    saved = json.loads((out / "config.json").read_text())
    if "quantization_config" in saved:                       # belt and braces: never a gguf quantizer on reload
        saved.pop("quantization_config")
        (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    AutoConfig.from_pretrained(out)        # the directory reads back as an ordinary model


@contextlib.contextmanager
def _quiet_bars() -> Iterator[None]:
    """transformers' GGUF reader draws its own tqdm bar ("Converting and de-quantizing GGUF tensors...") on
    sys.stderr; swiftbox prints one line instead. Verbose runs (SWIFTBOX_VERBOSE=1) see the bar."""
    from swiftbox.logs import verbose_requested

    if verbose_requested():
        yield
        return
    with contextlib.redirect_stderr(io.StringIO()):
        yield


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _types_line(header: dict[str, Any]) -> str:
    return ", ".join(f"{n} {t}" for t, n in sorted(header["tensor_types"].items(), key=lambda kv: -kv[1]))


def _drop_abandoned(target: Path) -> None:
    """Temp directories of conversions whose process is gone (killed part-way): never reused, so removed."""
    for stale in target.parent.glob(f".partial-{target.name}-*"):
        try:
            pid = int(stale.name[len(f".partial-{target.name}-"):].split("-", 1)[0])
            os.kill(pid, 0)
            if pid == os.getpid():
                raise ProcessLookupError
        except (ValueError, ProcessLookupError):
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:   # alive, another user's
            pass


def _versions() -> dict[str, str]:
    from swiftbox.versions import package_versions

    return package_versions(("transformers", "gguf", "torch"))


def record_of(path: Path) -> Optional[dict[str, Any]]:
    """The import record of a converted directory, or None when `path` is not one."""
    from swiftbox.artifacts import read_manifest

    manifest = read_manifest(path) if path.is_dir() else None
    return manifest if manifest and manifest.get("kind") == KIND else None


def resolve(path: Path, *, required: bool = False) -> Optional[Path]:
    """The converted directory for a local GGUF reference, or None when `path` names no GGUF."""
    file = gguf_file(path, required=required)
    return import_gguf(file) if file is not None else None
