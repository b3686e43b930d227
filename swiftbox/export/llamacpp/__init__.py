"""llama.cpp, driven by swiftbox: the GGUF export (`quantize --method gguf`), its proof and verify's GGUF checks.

Two pieces of one pinned llama-cpp-python release (LLAMA_CPP_VERSION) are used, never copied into swiftbox:
- its source distribution vendors the whole llama.cpp tree; swiftbox keeps it unpacked under
  $SWIFTBOX_CACHE/llama.cpp/<version>/src and runs llama.cpp's own `convert_hf_to_gguf.py` and
  `convert_lora_to_gguf.py` from there (in a child process, driver.py);
- built once from that tree (cmake + a C++ compiler, CPU only) it is the `llama_cpp` Python bindings: load a
  GGUF, evaluate logits, generate, and `llama_model_quantize` for the k-quants (runner.py).
`setup.py` fetches, builds and caches both (`python -m swiftbox.export.llamacpp.setup`; install.sh runs it for the
`gguf` extra). `gguf_file.py` reads a GGUF's header with the `gguf` package (llama.cpp's gguf-py, from PyPI);
`modelfile.py` writes Ollama's Modelfile from the model's chat template.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"   # llama-cpp-python; its sdist vendors the llama.cpp tree the converter comes from
INSTALL_HINT = ("SWIFTBOX_EXTRAS=quant,serve,dev,gguf ./install.sh (builds llama.cpp once, about 10-25 min on 2 "
                "cores; or: python -m swiftbox.export.llamacpp.setup in your environment)")

# --type -> (llama.cpp ftype name, the bits it is gated as, the converter's --outtype when it writes it directly)
TYPES: dict[str, tuple[str, int, str | None]] = {
    "f16": ("MOSTLY_F16", 16, "f16"),
    "bf16": ("MOSTLY_BF16", 16, "bf16"),
    "q8_0": ("MOSTLY_Q8_0", 8, "q8_0"),
    "q6_k": ("MOSTLY_Q6_K", 6, None),
    "q5_k_m": ("MOSTLY_Q5_K_M", 5, None),
    "q4_k_m": ("MOSTLY_Q4_K_M", 4, None),
}


def cache_dir() -> Path:
    """$SWIFTBOX_CACHE/llama.cpp/<version> (the sdist, its unpacked tree, the built wheel, build.json)."""
    root = Path(os.environ.get("SWIFTBOX_CACHE") or Path.home() / ".cache" / "swiftbox")
    return root / "llama.cpp" / LLAMA_CPP_VERSION


def tree() -> Path | None:
    """The llama.cpp source tree holding convert_hf_to_gguf.py: $SWIFTBOX_LLAMA_CPP_DIR, else the cached one."""
    override = os.environ.get("SWIFTBOX_LLAMA_CPP_DIR")
    candidates = [Path(override)] if override else [cache_dir() / "src" / "vendor" / "llama.cpp"]
    for path in candidates:
        if (path / "convert_hf_to_gguf.py").is_file():
            return path
    return None


def bindings_installed() -> bool:
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def missing() -> str | None:
    """Why GGUF export cannot run here (None: it can). Cheap: nothing is imported or built."""
    if not bindings_installed():
        return "llama.cpp's Python bindings (llama-cpp-python, built from source) are not installed"
    if importlib.util.find_spec("gguf") is None:
        return "the python package 'gguf' (llama.cpp's gguf-py) is not installed"
    return None
