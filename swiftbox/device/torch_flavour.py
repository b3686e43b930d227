"""Which build of torch (CPU, CUDA, ROCm) is installed, or which one pip is about to install.

Standard library only and runnable as a script, because install.sh calls it before swiftbox's own
dependencies exist. It never imports torch: the answer comes from the distribution's metadata (the
local version label `+cpu` / `+cu128` / `+rocm6.3` and the `nvidia-*` / `cuda-toolkit` requirements a
CUDA wheel carries), so it is quick and works for any stand-in package a test builds.

    python torch_flavour.py installed torch         -> "cpu 2.13.0+cpu" | "cuda 2.13.0" | "missing -"
    python torch_flavour.py report pip-report.json  -> the same for the wheel a `pip install --dry-run
                                                       --report` run chose (first entry, or a named one)
"""
from __future__ import annotations

import json
import sys
from importlib import metadata


def flavour(version: str, requires: list[str] | None) -> str:
    """"cuda", "rocm" or "cpu" from a version string and its Requires-Dist lines."""
    local = version.partition("+")[2].lower()
    if local.startswith("cu"):
        return "cuda"
    if local.startswith("rocm"):
        return "rocm"
    for req in requires or ():
        name = req.strip().lower()
        if name.startswith(("nvidia-", "nvidia_", "cuda-toolkit", "cuda-bindings")):
            return "cuda"
        if name.startswith(("pytorch-triton-rocm", "rocm")):
            return "rocm"
    return "cpu"


def installed(package: str) -> tuple[str, str]:
    """(flavour, version) of an installed distribution; ("missing", "-") when it is not installed."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return "missing", "-"
    return flavour(dist.version, dist.requires), dist.version


def from_report(path: str, package: str | None = None) -> tuple[str, str]:
    """(flavour, version) of the wheel a `pip install --dry-run --report PATH` run would install."""
    with open(path, encoding="utf-8") as fh:
        report = json.load(fh)
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        name = str(meta.get("name", "")).lower().replace("_", "-")
        if package is None or name == package.lower().replace("_", "-"):
            return flavour(str(meta.get("version", "")), meta.get("requires_dist")), str(meta.get("version"))
    return "missing", "-"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "installed":
        print(*installed(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "report":
        print(*from_report(argv[1], argv[2] if len(argv) > 2 else None))
        return 0
    print("usage: torch_flavour.py installed PACKAGE | report REPORT.json [PACKAGE]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
