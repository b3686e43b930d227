"""Drive llama.cpp's tools from swiftbox: HF model -> GGUF (convert_hf_to_gguf.py), PEFT LoRA -> GGUF LoRA
(convert_lora_to_gguf.py), GGUF -> k-quant GGUF (llama_model_quantize). Each runs in a child process
(driver.py) whose output goes to the step's log file; a failure raises with the log's last lines.

The refusal that needs no conversion, `check_architecture`: an architecture the converter's table does not list
(exit 3, naming it and what to use instead) - raised by the quantize step's check (export/writers/gguf_adapter.py),
before anything is written, so the converters here do not ask again. A BPE tokenizer whose pre-tokenizer neither
the converter (by its hash list) nor swiftbox (from tokenizer.json, `pre_tokenizer_of`) can name fails in the
converter, with its own message.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from swiftbox.errors import SwiftboxError, Unsupported
from swiftbox.export.llamacpp import INSTALL_HINT, TYPES, tree

ALTERNATIVE = "quantize --method gptq, awq or bnb (transformers and vLLM load them)"
GPT2_SPLIT = "ByteLevel"   # a ByteLevel pre-tokenizer with use_regex splits with the GPT-2 pattern


def ensure_tree() -> Path:
    """llama.cpp's tree with the converter scripts, fetched and unpacked into the cache on first use."""
    found = tree()
    if found is not None:
        return found
    from swiftbox.export.llamacpp import setup

    try:
        setup.unpack(setup.cache_dir())
    except SystemExit as exc:  # setup reports pip's failure as SystemExit(message)
        raise Unsupported(f"gguf: llama.cpp's converter is not here and could not be fetched ({exc}); run "
                          f"{INSTALL_HINT}, or point SWIFTBOX_LLAMA_CPP_DIR at a llama.cpp checkout") from None
    found = tree()
    if found is None:
        raise Unsupported(f"gguf: no convert_hf_to_gguf.py in the llama.cpp tree; run {INSTALL_HINT}")
    return found


def converter_architectures(llama_tree: Path) -> set[str]:
    """The HF architectures llama.cpp's converter maps to a GGUF model class (its TEXT_MODEL_MAP), read without
    importing the converter (which imports torch and every model module)."""
    init = llama_tree / "conversion" / "__init__.py"
    if init.is_file():
        module = ast.parse(init.read_text(encoding="utf-8"))
        for stmt in module.body:
            target: ast.expr
            value: ast.expr | None
            if isinstance(stmt, ast.AnnAssign):
                target, value = stmt.target, stmt.value
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id == "TEXT_MODEL_MAP" and value is not None:
                return set(ast.literal_eval(value))
    # older trees: one file with @ModelBase.register("Arch", ...) decorators
    script = (llama_tree / "convert_hf_to_gguf.py").read_text(encoding="utf-8")
    found: set[str] = set()
    for call in ast.walk(ast.parse(script)):
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "register":
            found |= {a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def architecture_of(model_dir: Path) -> str | None:
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    arches = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or []
    return arches[0] if arches else None


def check_architecture(model_dir: Path, llama_tree: Path) -> str:
    arch = architecture_of(model_dir)
    if arch is None:
        raise Unsupported(f"gguf: {model_dir}/config.json names no architecture, so llama.cpp's converter cannot "
                          f"pick a GGUF layout for it; use {ALTERNATIVE} instead")
    if arch not in converter_architectures(llama_tree):
        raise Unsupported(f"gguf: llama.cpp's converter does not know the architecture {arch} (llama-cpp-python "
                          f"{_tree_version(llama_tree)}); use {ALTERNATIVE} instead")
    return arch


def _tree_version(llama_tree: Path) -> str:
    from swiftbox.export.llamacpp import LLAMA_CPP_VERSION

    return LLAMA_CPP_VERSION if "SWIFTBOX_LLAMA_CPP_DIR" not in os.environ else f"tree {llama_tree}"


def pre_tokenizer_of(model_dir: Path) -> str | None:
    """llama.cpp's name for the tokenizer's BPE pre-tokenizer when tokenizer.json shows exactly one it implements:
    a GPT-2 byte-level split ("gpt-2"), or single digits first, then the GPT-2 split ("smollm"). None otherwise
    (the converter's own hash list then decides, and refuses what it does not know)."""
    try:
        spec = json.loads((Path(model_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (spec.get("model") or {}).get("type") != "BPE" or spec.get("normalizer"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not steps:
        return None
    last = steps[-1]
    byte_level = (last.get("type") == GPT2_SPLIT and last.get("use_regex", True)
                  and not last.get("add_prefix_space", False))
    if not byte_level:
        return None
    if len(steps) == 1:
        return "gpt-2"
    if len(steps) == 2 and steps[0].get("type") == "Digits" and steps[0].get("individual_digits"):
        return "smollm"
    return None


def _run(args: list[str], log: Path, what: str) -> None:
    """One driver call; output appended to `log`; a failure raises naming the last lines."""
    root = str(Path(__file__).resolve().parents[3])   # the repository root, for the driver child
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    env.pop("NO_LOCAL_GGUF", None)   # the converter must use the gguf-py of its own tree
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        done = subprocess.run([sys.executable, "-m", "swiftbox.export.llamacpp.driver", *args], stdout=out,
                              stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()][-3:]
        raise SwiftboxError(f"gguf: llama.cpp's {what} failed (exit {done.returncode}): "
                            f"{' | '.join(t.strip()[:200] for t in tail)}; full output in {log}")


def convert_model(model_dir: Path, out: Path, outtype: str, log: Path) -> None:
    """HF model directory -> one GGUF file (outtype f32 | f16 | bf16 | q8_0 | auto)."""
    llama_tree = ensure_tree()
    pre = pre_tokenizer_of(model_dir)
    args = ["convert", str(llama_tree)] + (["--pre", pre] if pre else [])
    _run([*args, "--", str(model_dir), "--outtype", outtype, "--outfile", str(out)], log,
         "convert_hf_to_gguf.py")


def convert_lora(adapter_dir: Path, base_dir: Path, out: Path, outtype: str, log: Path) -> None:
    """PEFT LoRA adapter -> GGUF LoRA (llama-server --lora, Ollama ADAPTER); the base gives config and names."""
    llama_tree = ensure_tree()
    _run(["lora", str(llama_tree), "--", str(adapter_dir), "--base", str(base_dir), "--outtype", outtype,
          "--outfile", str(out)], log, "convert_lora_to_gguf.py")


def quantize_file(src: Path, out: Path, gguf_type: str, log: Path) -> None:
    """A 16/32-bit GGUF -> `gguf_type` with llama.cpp's quantizer (the k-quant mixes live only there)."""
    threads = max(1, min(os.cpu_count() or 1, 8))
    _run(["quantize", str(src), str(out), TYPES[gguf_type][0], str(threads)], log, "llama_model_quantize")
