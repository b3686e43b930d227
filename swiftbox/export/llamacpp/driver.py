"""The child process that runs llama.cpp's own tools, so their logging, argv parsing and memory stay out of the
swiftbox process (convert.py starts it and sends its output to the run's log):

    python -m swiftbox.export.llamacpp.driver convert TREE [--pre NAME] -- ARGS...   # convert_hf_to_gguf.py ARGS
    python -m swiftbox.export.llamacpp.driver lora TREE -- ARGS...                   # convert_lora_to_gguf.py ARGS
    python -m swiftbox.export.llamacpp.driver quantize IN OUT FTYPE THREADS         # llama_model_quantize (k-quants)

The scripts run unmodified from llama.cpp's tree (runpy, as `python script.py ARGS` would); `--pre` names the
BPE pre-tokenizer for a tokenizer the converter does not recognise (swiftbox.compat.llamacpp_bpe_pre_tokenizer).
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def run_script(tree: Path, script: str, args: list[str], pre: str | None = None) -> int:
    sys.path[:0] = [str(tree), str(tree / "gguf-py")]   # the converter's own gguf-py, as the script itself does
    from swiftbox.compat import llamacpp_bpe_pre_tokenizer

    sys.argv = [str(tree / script), *args]
    with llamacpp_bpe_pre_tokenizer(pre):
        try:
            runpy.run_path(str(tree / script), run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


def quantize(src: str, out: str, ftype: str, threads: int) -> int:
    import ctypes

    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{ftype}")
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(params))
    if rc != 0:
        print(f"llama_model_quantize returned {rc}", file=sys.stderr)
    return 1 if rc != 0 else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m swiftbox.export.llamacpp.driver")
    sub = parser.add_subparsers(dest="tool", required=True)
    conv = sub.add_parser("convert")
    conv.add_argument("tree", type=Path)
    conv.add_argument("--pre", default=None)
    lora = sub.add_parser("lora")
    lora.add_argument("tree", type=Path)
    quant = sub.add_parser("quantize")
    quant.add_argument("src")
    quant.add_argument("out")
    quant.add_argument("ftype")
    quant.add_argument("threads", type=int)
    args = parser.parse_args(argv)
    if args.tool == "convert":
        return run_script(args.tree, "convert_hf_to_gguf.py", rest, args.pre)
    if args.tool == "lora":
        return run_script(args.tree, "convert_lora_to_gguf.py", rest)
    return quantize(args.src, args.out, args.ftype, args.threads)


if __name__ == "__main__":
    raise SystemExit(main())
