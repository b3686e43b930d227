"""The version lock: the exact package versions CI passed with, in `swiftbox/constraints/`.

`common.txt` holds the libraries that are the same wheels on every accelerator (transformers, tokenizers, trl,
peft, accelerate, datasets, safetensors, gptqmodel, bitsandbytes, fastapi, uvicorn, openai, ...); `cpu.txt` the
torch-bound set a CPU machine takes from the lock as well (torch, torchao, numpy) - on CUDA and NPU torch is the
one install.sh finds or the compat matrix names, and the packages built against it follow it. install.sh applies
them with `pip install -c` (SWIFTBOX_FLOAT=1 floats); `./launch.sh doctor` lists what differs (`differences`).

A line whose package needs a newer Python than the oldest swiftbox supports carries a `python_version` marker,
so the lock never makes an install impossible on an older interpreter (there that package floats).
Refresh the lock from a venv that just passed CI: `python -m swiftbox.pins write`.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

LOCK_DIR = Path(__file__).resolve().parent / "constraints"
COMMON, CPU = "common.txt", "cpu.txt"
# locked on CPU only: torch itself and what is built for one torch release (on an accelerator, the torch found)
TORCH_BOUND = ("torch", "torchao", "numpy")
# never locked: swiftbox itself and the installer's own tools
UNLOCKED = ("swiftbox", "pip", "setuptools", "wheel")
OLDEST_PYTHON = (3, 10)   # pyproject's requires-python


@dataclass(frozen=True)
class Pin:
    name: str                 # canonical (PEP 503) name
    version: str
    marker: Optional[str]     # an environment marker, or None

    def line(self) -> str:
        return f"{self.name}=={self.version}" + (f"; {self.marker}" if self.marker else "")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def files_for(platform_name: str) -> list[Path]:
    """The lock files install.sh applies on this platform (cpu: both; cuda / npu: common.txt)."""
    return [LOCK_DIR / COMMON] + ([LOCK_DIR / CPU] if platform_name == "cpu" else [])


def read(path: Path) -> list[Pin]:
    pins = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        name, sep, version = spec.partition("==")
        if not sep:
            raise ValueError(f"{path.name}: '{raw}' is not NAME==VERSION")
        pins.append(Pin(canonical(name.strip()), version.strip(), marker.strip() or None))
    return pins


def applies(pin: Pin) -> bool:
    """Does the pin's marker hold for this interpreter?"""
    if not pin.marker:
        return True
    from packaging.markers import Marker

    return Marker(pin.marker).evaluate()


def locked(platform_name: str) -> dict[str, str]:
    """{canonical name: locked version} that applies here."""
    return {p.name: p.version for path in files_for(platform_name) for p in read(path) if applies(p)}


def same(installed: str, pinned: str) -> bool:
    """`installed` satisfies `==pinned` (PEP 440: 2.13.0+cpu is 2.13.0)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion

    try:
        return SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return installed == pinned


def installed_versions() -> dict[str, str]:
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out.setdefault(canonical(name), dist.version)
    return out


def differences(platform_name: str, installed: Optional[dict[str, str]] = None) -> list[dict[str, str]]:
    """Installed packages whose version is not the locked one: [{name, installed, locked}]. Packages the lock
    names but this install does not have (an extra not chosen) are not differences."""
    have = {canonical(k): v for k, v in (installed if installed is not None else installed_versions()).items()}
    return [{"name": name, "installed": have[name], "locked": version}
            for name, version in sorted(locked(platform_name).items())
            if name in have and not same(have[name], version)]


# -- writing the lock from a venv CI passed with -------------------------------------------------------------
def _marker(requires_python: Optional[str]) -> Optional[str]:
    """`python_version >= "X.Y"` when the package needs a newer Python than the oldest swiftbox supports."""
    if not requires_python:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return None
    oldest = ".".join(map(str, OLDEST_PYTHON))
    if spec.contains(oldest + ".0") or spec.contains(oldest + ".18"):
        return None
    floors = [s.version for s in spec if s.operator in (">=", ">")]
    return f'python_version >= "{".".join(max(floors, key=_key).split(".")[:2])}"' if floors else None


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def pins_from(dists: Iterable[tuple[str, str, Optional[str]]]) -> tuple[list[Pin], list[Pin]]:
    """(common, cpu) pins from (name, version, requires_python) of an environment; local labels dropped."""
    common: list[Pin] = []
    cpu: list[Pin] = []
    for name, version, requires_python in sorted(dists, key=lambda d: canonical(d[0])):
        key = canonical(name)
        if key in UNLOCKED:
            continue
        pin = Pin(key, version.split("+", 1)[0], _marker(requires_python))
        (cpu if key in TORCH_BOUND else common).append(pin)
    return common, cpu


def write(out_dir: Path = LOCK_DIR) -> tuple[Path, Path]:
    """Write common.txt and cpu.txt from the packages installed in this interpreter's environment."""
    import datetime
    from importlib import metadata

    seen: dict[str, tuple[str, str, Optional[str]]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in seen:
            seen[canonical(name)] = (name, dist.version, dist.metadata["Requires-Python"])
    common, cpu = pins_from(seen.values())
    torch = next((v for n, v, _ in seen.values() if canonical(n) == "torch"), "not installed")
    stamp = (f"# written by `python -m swiftbox.pins write` on {datetime.date.today()} from a venv CI passed with\n"
             f"# (Python {sys.version.split()[0]}, torch {torch}). Applied by install.sh (pip install -c); "
             "SWIFTBOX_FLOAT=1 floats.\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / COMMON, out_dir / CPU)
    heads = ("# every accelerator: the libraries that are the same wheels on CPU, CUDA and NPU\n",
             "# CPU machines only: torch and the packages built for one torch release (elsewhere: the torch found)\n")
    for path, head, pins in zip(paths, heads, (common, cpu)):
        path.write_text(head + stamp + "".join(p.line() + "\n" for p in pins), encoding="utf-8")
    return paths


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["write"]:
        for path in write(Path(args[1]) if len(args) > 1 else LOCK_DIR):
            print(path)
        return 0
    if args[:1] == ["diff"]:
        platform_name = args[1] if len(args) > 1 else "cpu"
        for d in differences(platform_name):
            print(f"{d['name']}: installed {d['installed']}, locked {d['locked']}")
        return 0
    print("usage: python -m swiftbox.pins write [DIR] | diff [cpu|cuda|npu]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
