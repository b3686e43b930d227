"""Fetch, build and cache llama.cpp once: `python -m swiftbox.export.llamacpp.setup` (install.sh runs it for the
`gguf` extra).

1. `pip download --no-binary :all: llama-cpp-python==<pinned>` puts its source distribution (76 MB, the whole
   llama.cpp tree vendored) into $SWIFTBOX_CACHE/llama.cpp/<version>/ - once;
2. it is unpacked to .../src: swiftbox runs llama.cpp's converter scripts from .../src/vendor/llama.cpp;
3. `pip wheel` builds the bindings from that same tree (cmake + g++, CPU only, without the multimodal
   library, tests, examples, tools and server: CMAKE_ARGS below; the user's own CMAKE_ARGS are appended, e.g.
   -DGGML_CUDA=on) into .../wheels, and the time it took goes to .../build.json;
4. `pip install` installs that wheel (with the caller's constraints file, so torch is never touched).
Every step is skipped when its result is already there, so a new venv reuses the built wheel (seconds).
Only the standard library is imported: install.sh runs this before swiftbox's own dependencies are installed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from swiftbox.export.llamacpp import LLAMA_CPP_VERSION, cache_dir

LEAN_CMAKE_ARGS = ("-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF "
                   "-DLLAMA_BUILD_SERVER=OFF")
SDIST = f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"


def say(msg: str) -> None:
    print(f"swiftbox gguf: {msg}", file=sys.stderr, flush=True)


def _pip(*args: str, log: Path | None = None, env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    out = log.open("a") if log else None
    try:
        done = subprocess.run(cmd, stdout=out or subprocess.DEVNULL, stderr=subprocess.STDOUT if out else None,
                              env=env, check=False)
    finally:
        if out:
            out.close()
    if done.returncode != 0:
        where = f"; see {log}" if log else ""
        raise SystemExit(f"swiftbox gguf: `pip {' '.join(args[:3])} ...` failed (exit {done.returncode}){where}")


def fetch(folder: Path) -> Path:
    """The sdist in the cache (downloaded once)."""
    sdist = folder / SDIST
    if not sdist.is_file():
        say(f"downloading llama-cpp-python {LLAMA_CPP_VERSION} source (76 MB, once) into {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        _pip("download", "--no-deps", "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_VERSION}", "-d",
             str(folder), log=folder / "fetch.log")
    return sdist


def unpack(folder: Path) -> Path:
    """The unpacked tree (.../src), made atomically from the sdist."""
    src = folder / "src"
    if (src / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").is_file():
        return src
    sdist = fetch(folder)
    partial = folder / "src.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        if sys.version_info >= (3, 12):
            archive.extractall(partial, filter="data")
        else:
            archive.extractall(partial)  # noqa: S202 - the sdist pip just downloaded from the package index
    (top,) = [p for p in partial.iterdir() if p.is_dir()]
    shutil.rmtree(src, ignore_errors=True)
    top.rename(src)
    shutil.rmtree(partial, ignore_errors=True)
    return src


def built_wheel(folder: Path) -> Path | None:
    found = sorted((folder / "wheels").glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    return found[-1] if found else None


def build(folder: Path, jobs: int | None = None) -> Path:
    """The bindings' wheel, built once from the unpacked tree; the build time goes to build.json."""
    wheel = built_wheel(folder)
    if wheel is not None:
        return wheel
    src = unpack(folder)
    jobs = jobs or min(os.cpu_count() or 2, 8)
    cmake_args = " ".join(filter(None, [LEAN_CMAKE_ARGS, os.environ.get("CMAKE_ARGS", "")]))
    env = {**os.environ, "CMAKE_ARGS": cmake_args, "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}
    say(f"building llama.cpp {LLAMA_CPP_VERSION} (CPU, {jobs} jobs; once - about 10-25 min on 2 cores; log "
        f"{folder / 'build.log'})")
    started = time.time()
    _pip("wheel", "--no-deps", "-w", str(folder / "wheels"), str(src), log=folder / "build.log", env=env)
    seconds = round(time.time() - started, 1)
    wheel = built_wheel(folder)
    if wheel is None:
        raise SystemExit(f"swiftbox gguf: the build left no wheel in {folder / 'wheels'}; see {folder / 'build.log'}")
    facts = {"version": LLAMA_CPP_VERSION, "seconds": seconds, "jobs": jobs, "cmake_args": cmake_args,
             "machine": platform.machine(), "cpus": os.cpu_count(), "load_after": _load(), "wheel": wheel.name}
    (folder / "build.json").write_text(json.dumps(facts, indent=1))
    say(f"built in {seconds / 60:.1f} min: {wheel.name}")
    return wheel


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def install(folder: Path, constraints: str | None) -> None:
    """pip install the built wheel (numpy, jinja2, diskcache come with it; torch is held by the constraints)."""
    wheel = build(folder)
    extra = ["-c", constraints] if constraints else []
    _pip("install", "--disable-pip-version-check", "-q", *extra, str(wheel), log=folder / "install.log")
    say(f"llama-cpp-python {LLAMA_CPP_VERSION} installed; converter at {folder / 'src' / 'vendor' / 'llama.cpp'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swiftbox.export.llamacpp.setup",
                                     description="fetch, build (once) and install llama.cpp for GGUF export")
    parser.add_argument("--tree-only", action="store_true", help="only fetch and unpack the converter's tree")
    parser.add_argument("--constraints", default=None, help="pip constraints file (install.sh: the torch pin)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: CPUs, at most 8)")
    args = parser.parse_args(argv)
    folder = cache_dir()
    unpack(folder)
    if not args.tree_only:
        if args.jobs:
            build(folder, args.jobs)
        install(folder, args.constraints)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
