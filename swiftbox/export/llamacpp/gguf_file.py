"""What a GGUF file says about itself, read with the `gguf` package (llama.cpp's gguf-py): the header, the
metadata (architecture, file type, tokenizer, chat template, special tokens) and each tensor's type.
Only the header and the tensor table are read (the file is memory-mapped); nothing is dequantized.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# tensor types a quantized file may store a decoder weight in (k-quants fall back to these where a row does not
# divide into 256-wide super-blocks)
QUANT_TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL",
               "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4"}
FLOAT_TYPES = {"F32", "F16", "BF16", "F64"}


@dataclass
class GGUFInfo:
    path: Path
    version: int
    architecture: str | None
    file_type: int | None
    general_type: str | None           # "model" | "adapter"
    tensor_count: int
    header_tensor_count: int
    tensor_types: dict[str, str] = field(default_factory=dict)      # name -> "Q8_0", "F32", ...
    tensor_shapes: dict[str, list[int]] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)           # scalar / string metadata (no token lists)
    tokens: int = 0                    # entries in tokenizer.ggml.tokens

    @property
    def type_counts(self) -> dict[str, int]:
        return dict(Counter(self.tensor_types.values()))

    @property
    def adds_bos(self) -> bool | None:
        """tokenizer.ggml.add_bos_token: whether llama.cpp (and Ollama) put BOS before the prompt (None: unset)."""
        value = self.meta.get("tokenizer.ggml.add_bos_token")
        return bool(value) if isinstance(value, (bool, int)) else None

    @property
    def chat_template(self) -> str | None:
        value = self.meta.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    def weight_tensors(self) -> dict[str, str]:
        """The 2-D weights of the repeating blocks (blk.N.*.weight, not norms): what quantization must reach."""
        return {n: t for n, t in self.tensor_types.items()
                if n.startswith("blk.") and n.endswith(".weight") and "norm" not in n
                and len(self.tensor_shapes.get(n, [])) == 2}


def read(path: Path) -> GGUFInfo:
    """Parse `path`'s header. Raises ValueError naming the file when it is not a readable GGUF."""
    from gguf import GGUFReader

    path = Path(path)
    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:  # noqa: BLE001 - gguf raises ValueError, struct/numpy errors on damage
        raise ValueError(f"{path.name} is not a readable GGUF file ({' '.join(str(exc).split())[:140]})") from None
    meta: dict[str, object] = {}
    tokens = 0
    for key, fld in reader.fields.items():
        if key == "tokenizer.ggml.tokens":
            tokens = len(fld.data)
            continue
        if len(fld.data) > 1:      # token lists, merges, scores
            continue
        try:
            meta[key] = fld.contents()
        except Exception:  # noqa: BLE001 - an odd value type is not worth failing the read
            continue
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    shapes = {t.name: [int(x) for x in t.shape] for t in reader.tensors}
    header_count = meta.get("GGUF.tensor_count")
    ftype = meta.get("general.file_type")
    return GGUFInfo(path=path, version=int(meta.get("GGUF.version") or 0),  # type: ignore[call-overload]
                    architecture=meta.get("general.architecture"),  # type: ignore[arg-type]
                    file_type=int(ftype) if isinstance(ftype, int) else None,
                    general_type=meta.get("general.type"),  # type: ignore[arg-type]
                    tensor_count=len(types),
                    header_tensor_count=int(header_count) if isinstance(header_count, int) else len(types),
                    tensor_types=types, tensor_shapes=shapes, meta=meta, tokens=tokens)


def find(folder: Path) -> list[Path]:
    """The .gguf files of an export directory (or the file itself)."""
    folder = Path(folder)
    if folder.is_file():
        return [folder] if folder.suffix == ".gguf" else []
    return sorted(folder.glob("*.gguf")) if folder.is_dir() else []


WEIGHT_TYPES = {"f16": {"F16"}, "bf16": {"BF16"}, "q8_0": {"Q8_0"}}


def inspect(info, gguf_type: str) -> dict:
    """Every decoder weight (blk.N.*.weight, 2-D) stored in the type asked for (or, for k-quants, a quantized one)."""
    weights = info.weight_tensors()
    allowed = WEIGHT_TYPES.get(gguf_type, QUANT_TYPES)
    bad = sorted(n for n, t in weights.items() if t not in allowed)
    return {"quantized_modules": len(weights) - len(bad), "linear_modules": len(weights), "unquantized": bad[:3],
            "error": None if weights else f"{info.path.name} holds no decoder weight tensors (blk.N.*.weight)"}
