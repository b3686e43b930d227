"""A bounded reader of a GGUF file's header: magic, version, metadata and the tensor table, read before anything
else touches the file (before it is hashed, before gguf's GGUFReader - which reads metadata arrays eagerly - and
before transformers builds a model from it).

Every length in the header is checked against a cap and against the bytes the file still holds before anything is
allocated for it: at most `MAX_KV` metadata entries and `MAX_TENSORS` tensors, strings of at most `MAX_STRING`
bytes (keys and tensor names `MAX_NAME`), arrays of at most `MAX_ARRAY` elements nested at most `MAX_NESTING` deep,
tensors of at most 4 dimensions, each tensor's data inside the file. So a 1 KB file that declares a billion-entry
array is refused in microseconds, and a file that is not GGUF is refused from its first 4 bytes.

`check_model` then checks what the metadata says against itself and the tensor table: the architecture's counts
(`block_count`, heads, sizes) are present and positive, the layers the tensors carry are exactly 0..block_count-1,
and the tokenizer is one transformers can build (unique tokens, merges of two parts, special-token ids in range,
per-token arrays as long as the vocabulary). Every problem is a UserError (exit 2) naming the file and the field.
"""
from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from swiftbox.errors import UserError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KV = 4096
MAX_TENSORS = 1 << 16
MAX_STRING = 16 << 20
MAX_NAME = 1024
MAX_ARRAY = 1 << 24
MAX_NESTING = 2          # an array of arrays at most
MAX_DIMS = 4             # GGML_MAX_DIMS
MAX_BLOCKS = 1024
MAX_SIZE = 1 << 20       # embedding / feed-forward / context length / head counts: larger is not a model
DEFAULT_ALIGNMENT = 32

# value type -> (struct code, size); 8 string, 9 array
SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4), 6: ("f", 4), 7: ("?", 1),
           10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
STRING, ARRAY = 8, 9


@dataclass
class TensorInfo:
    name: str
    dims: tuple[int, ...]        # GGML order: dims[0] is the innermost (the reverse of torch's shape)
    type_name: str
    offset: int                  # from the start of the data section
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))


@dataclass
class Header:
    file: Path
    version: int
    size: int
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0

    @property
    def architecture(self) -> Optional[str]:
        arch = self.meta.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_key(self, suffix: str) -> Any:
        return self.meta.get(f"{self.architecture}.{suffix}")


class _Cursor:
    def __init__(self, buf: Any, size: int, where: str):
        self.buf, self.size, self.pos, self.where = buf, size, 0, where

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise UserError(f"{self.where}: not a readable GGUF file ({what} needs {n} bytes at offset {self.pos}, "
                            f"but the file ends at {self.size}: truncated?)")

    def unpack(self, code: str, size: int, what: str) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str, cap: int) -> str:
        n = self.unpack("Q", 8, f"{what} length")
        if n > cap:
            raise UserError(f"{self.where}: {what} is {n} bytes long, more than the {cap} a GGUF header may hold here")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{self.where}: {what} is not UTF-8 text") from None


def read(file: Path) -> Header:
    """The header of GGUF `file`, every length bounded (see the module docstring); UserError (exit 2) otherwise."""
    where = str(file)
    try:
        with open(file, "rb") as fh:
            magic = fh.read(4)
            if magic != MAGIC:
                raise UserError(f"{where}: not a GGUF file (it starts with {magic!r}, a GGUF file with {MAGIC!r})")
            size = fh.seek(0, 2)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(file, buf, size, where)
    except OSError as exc:
        raise UserError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None


def _parse(file: Path, buf: Any, size: int, where: str) -> Header:
    cur = _Cursor(buf, size, where)
    cur.pos = 4
    version = cur.unpack("I", 4, "version")
    if version not in VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        hint = " (a big-endian file: re-export it little-endian)" if swapped in VERSIONS else ""
        raise UserError(f"{where}: not a readable GGUF file (version {version}; swiftbox reads "
                        f"{', '.join(map(str, VERSIONS))}){hint}")
    n_tensors = cur.unpack("Q", 8, "tensor count")
    n_kv = cur.unpack("Q", 8, "metadata count")
    if n_kv > MAX_KV or n_kv * 13 > size:          # a key of >= 1 byte: 8 + 1 + 4 bytes at least
        raise UserError(f"{where}: the header declares {n_kv} metadata entries (at most {MAX_KV}, and as many as "
                        "the file can hold)")
    if n_tensors > MAX_TENSORS or n_tensors * 25 > size:     # name >= 1 byte, n_dims, type, offset
        raise UserError(f"{where}: the header declares {n_tensors} tensors (at most {MAX_TENSORS}, and as many as "
                        "the file can hold)")
    header = Header(file=file, version=version, size=size)
    for _ in range(n_kv):
        key = cur.string("a metadata key", MAX_NAME)
        if key in header.meta:
            raise UserError(f"{where}: metadata key {key!r} appears twice")
        kind = cur.unpack("I", 4, f"the type of {key}")
        header.meta[key] = _value(cur, kind, key, 0)
    alignment = header.meta.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or not 1 <= alignment <= 1 << 16 or \
            alignment & (alignment - 1):
        raise UserError(f"{where}: general.alignment {alignment!r} is not a power of two up to 65536")
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}", MAX_NAME)
        n_dims = cur.unpack("I", 4, f"{name}: dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise UserError(f"{where}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        dims = tuple(cur.unpack("Q", 8, f"{name}: dimensions") for _ in range(n_dims))
        type_id = cur.unpack("I", 4, f"{name}: type")
        offset = cur.unpack("Q", 8, f"{name}: offset")
        infos.append((name, dims, type_id, offset))
    data_start = -(-cur.pos // alignment) * alignment
    header.data_start = data_start
    seen: set[str] = set()
    for name, dims, type_id, offset in infos:
        if name in seen:
            raise UserError(f"{where}: tensor {name!r} appears twice")
        seen.add(name)
        header.tensors.append(_tensor(where, name, dims, type_id, offset, data_start, size))
    return header


def _value(cur: _Cursor, kind: int, key: str, depth: int) -> Any:
    if kind in SCALARS:
        code, width = SCALARS[kind]
        return cur.unpack(code, width, key)
    if kind == STRING:
        return cur.string(key, MAX_STRING)
    if kind != ARRAY:
        raise UserError(f"{cur.where}: metadata {key!r} has value type {kind}, which GGUF does not define")
    if depth >= MAX_NESTING:
        raise UserError(f"{cur.where}: metadata {key!r} nests arrays more than {MAX_NESTING} deep")
    item = cur.unpack("I", 4, f"{key}: element type")
    count = cur.unpack("Q", 8, f"{key}: length")
    least = SCALARS[item][1] if item in SCALARS else 8 if item == STRING else 12 if item == ARRAY else 0
    if not least:
        raise UserError(f"{cur.where}: metadata {key!r} is an array of type {item}, which GGUF does not define")
    if count > MAX_ARRAY or count * least > cur.size - cur.pos:
        raise UserError(f"{cur.where}: metadata {key!r} declares {count} elements (at most {MAX_ARRAY}, and as many "
                        "as the file can hold)")
    if item in SCALARS:
        import numpy as np

        code, width = SCALARS[item]
        cur.need(count * width, key)
        values = np.frombuffer(cur.buf, dtype="<" + code, count=count, offset=cur.pos).tolist()
        cur.pos += count * width
        return values
    return [_value(cur, item, f"{key}[{i}]", depth + 1) for i in range(count)]


def _tensor(where: str, name: str, dims: tuple[int, ...], type_id: int, offset: int, data_start: int,
            size: int) -> TensorInfo:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        kind = GGMLQuantizationType(type_id)
        block, type_size = GGML_QUANT_SIZES[kind]
    except (ValueError, KeyError):
        raise UserError(f"{where}: tensor {name!r} has GGML type {type_id}, which gguf does not know") from None
    if any(d < 1 for d in dims):
        raise UserError(f"{where}: tensor {name!r} has a dimension of size 0 ({list(dims)})")
    elements = 1
    for d in dims:
        elements *= d
        if elements > size * 64:     # no GGML type packs more than a few values a byte
            raise UserError(f"{where}: tensor {name!r} declares {list(dims)} values, more than the file can hold")
    if dims[0] % block:
        raise UserError(f"{where}: tensor {name!r} ({kind.name}) has rows of {dims[0]} values, not a multiple of "
                        f"its block of {block}")
    nbytes = elements // block * type_size
    if data_start + offset + nbytes > size:
        raise UserError(f"{where}: tensor {name!r} ({kind.name}, {list(dims)}) needs {nbytes} bytes at offset "
                        f"{offset} of the data, past the end of the file (truncated?)")
    return TensorInfo(name=name, dims=dims, type_name=kind.name, offset=offset, nbytes=nbytes)


# -- what the metadata says, against itself and the tensor table -------------------------------------------------
SPECIAL_ID = re.compile(r"^tokenizer\.ggml\.\w+_token_id$")


def _positive(header: Header, suffix: str, *, required: bool = True, cap: int = MAX_SIZE) -> Optional[int]:
    value = header.arch_key(suffix)
    key = f"{header.architecture}.{suffix}"
    if value is None:
        if required:
            raise UserError(f"{header.file}: the GGUF metadata has no {key}; without it transformers would build a "
                            "model of its default size, not this file's")
        return None
    if isinstance(value, list):           # per-layer values (head counts of some architectures)
        values = value
    else:
        values = [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= cap:
            raise UserError(f"{header.file}: GGUF metadata {key} is {str(value)[:60]}; expected a whole number from "
                            f"1 to {cap}")
    return int(max(values))


def check_model(header: Header) -> None:
    """The metadata's counts and tokenizer against themselves and the tensor table (exit 2 naming the field)."""
    file = header.file
    if not header.architecture:
        raise UserError(f"{file}: the GGUF metadata has no general.architecture")
    if not header.tensors:
        raise UserError(f"{file}: the GGUF holds no tensors (a vocabulary-only file is not a model)")
    blocks = _positive(header, "block_count", cap=MAX_BLOCKS)
    hidden = _positive(header, "embedding_length")
    heads = _positive(header, "attention.head_count", cap=4096)
    kv_heads = _positive(header, "attention.head_count_kv", required=False, cap=4096)
    _positive(header, "feed_forward_length", required=False)
    _positive(header, "context_length", required=False, cap=1 << 24)
    if heads and hidden and header.arch_key("attention.key_length") is None and hidden % heads:
        raise UserError(f"{file}: {header.architecture}.embedding_length {hidden} is not a multiple of "
                        f"attention.head_count {heads}")
    if heads and kv_heads and heads % kv_heads:
        raise UserError(f"{file}: {header.architecture}.attention.head_count {heads} is not a multiple of "
                        f"attention.head_count_kv {kv_heads}")
    layers = {int(m.group(1)) for t in header.tensors if (m := re.match(r"blk\.(\d+)\.", t.name))}
    if blocks is not None and layers != set(range(blocks)):
        extra = sorted(layers - set(range(blocks)))[:3]
        absent = sorted(set(range(blocks)) - layers)[:3]
        raise UserError(f"{file}: {header.architecture}.block_count is {blocks}, but the tensors carry layers "
                        + (f"beyond it ({extra})" if extra else f"without layer(s) {absent}"))
    _check_tokenizer(header)


def _check_tokenizer(header: Header) -> None:
    file = header.file
    tokens = header.meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise UserError(f"{file}: the GGUF metadata has no tokenizer.ggml.tokens (no vocabulary to build a "
                        "tokenizer from)")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise UserError(f"{file}: tokenizer.ggml.tokens is not a non-empty list of strings")
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = next(t for t in tokens if t in seen or seen.add(t))   # type: ignore[func-returns-value]
        raise UserError(f"{file}: tokenizer.ggml.tokens holds {twice[:40]!r} more than once (token ids would be "
                        "ambiguous)")
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        values = header.meta.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != len(tokens)):
            raise UserError(f"{file}: {key} has {len(values) if isinstance(values, list) else 'no list of'} "
                            f"entries for {len(tokens)} tokens")
    merges = header.meta.get("tokenizer.ggml.merges")
    if merges is not None:
        if not isinstance(merges, list):
            raise UserError(f"{file}: tokenizer.ggml.merges is not a list of strings")
        for i, merge in enumerate(merges):
            parts = merge.split(" ") if isinstance(merge, str) else []
            if len(parts) != 2 or not all(parts):
                raise UserError(f"{file}: tokenizer.ggml.merges[{i}] is {str(merge)[:40]!r}; a merge is two tokens "
                                "separated by one space")
    for key, value in header.meta.items():
        if SPECIAL_ID.match(key):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(tokens):
                raise UserError(f"{file}: {key} is {value!r}, not a token id of the {len(tokens)}-token vocabulary")
    model = header.meta.get("tokenizer.ggml.model")
    if model is not None and not isinstance(model, str):
        raise UserError(f"{file}: tokenizer.ggml.model is not a string")
    template = header.meta.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise UserError(f"{file}: tokenizer.chat_template is not a string")
    vocab = [t for t in header.tensors if t.name == "token_embd.weight"]
    if not vocab:
        raise UserError(f"{file}: the GGUF has no token_embd.weight (the token embedding); transformers would start "
                        "it from random values")
    declared = header.arch_key("vocab_size")
    rows = vocab[0].shape[0]
    if rows != (declared if isinstance(declared, int) and not isinstance(declared, bool) else len(tokens)):
        raise UserError(f"{file}: token_embd.weight has {rows} rows for "
                        + (f"{header.architecture}.vocab_size {declared}" if declared is not None else
                           f"{len(tokens)} tokens"))
