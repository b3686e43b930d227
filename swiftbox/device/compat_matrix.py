"""Known-good version sets (compat_matrix.json) and the check of this machine against them.

NPU: CANN <-> torch <-> torch_npu (Ascend/pytorch's mapping table) and vllm-ascend <-> vllm <-> CANN
<-> torch <-> torch_npu <-> triton-ascend (vllm-ascend's release matrix). CUDA: vllm <-> torch, plus
floors (bitsandbytes, flash-attn). Each row in the JSON names its source.

`check(installed)` takes the installed versions (a dict; tests inject them) and returns Findings:
"ok", "error" (a known mismatch, with the exact pip command that fixes it), "warn" (off the tested
set, may work) or "unknown" (a version the table does not list). Standard library only and runnable
as a script, because install.sh uses it before anything else is installed:

    python compat_matrix.py cann           -> the CANN version found on this machine (exit 1: none)
    python compat_matrix.py pins CANN      -> "torch==X torch_npu==Y" for that CANN (exit 1: unknown)
    python compat_matrix.py pins CANN --vllm -> the whole vllm-ascend release set for that CANN
"""
from __future__ import annotations

import glob
import json
import os
import platform
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

DATA = Path(__file__).with_name("compat_matrix.json")
CANN_INFO = "ascend_toolkit_install.info"


@dataclass
class Finding:
    status: str          # ok | warn | error | unknown
    component: str       # what was checked: "torch_npu", "vllm_ascend", "vllm", "bitsandbytes", ...
    message: str
    fix: str | None = None
    source: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def load(path: Path = DATA) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# -- versions -------------------------------------------------------------------------------------

def base(version: str | None) -> str:
    """The version without its local label: 2.13.0+cpu -> 2.13.0; leading "v" dropped."""
    return (version or "").strip().lstrip("v").split("+", 1)[0]


def release(version: str | None) -> tuple[int, ...]:
    """The numeric release part: 2.10.0.post4 -> (2, 10, 0); 8.3.RC2 -> (8, 3)."""
    parts = []
    for piece in base(version).split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def cann_key(version: str | None) -> str:
    """CANN versions compared as MAJOR.MINOR.PATCH-or-RCn, upper case: 8.0.rc1.alpha002 -> 8.0.RC1."""
    return ".".join(base(version).upper().split(".")[:3])


def at_least(version: str | None, floor: str) -> bool:
    got, want = release(version), release(floor)
    return got[:len(want)] >= want


# -- CANN on this machine ---------------------------------------------------------------------------

def cann_info_files() -> list[str]:
    """Where CANN's toolkit writes ascend_toolkit_install.info (old and new layouts), env first."""
    arch = f"{platform.machine()}-linux"
    roots = [os.environ.get(k) for k in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_CANN_PATH")]
    roots += ["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann",
              *sorted(glob.glob("/usr/local/Ascend/cann-*"), reverse=True),
              os.path.expanduser("~/Ascend/ascend-toolkit/latest")]
    files = []
    for root in filter(None, roots):
        files += [os.path.join(root, arch, CANN_INFO), os.path.join(root, CANN_INFO)]
    return files


def cann_version(files: list[str] | None = None) -> tuple[str | None, str]:
    """(version, where it was read) from the first toolkit info file found; never touches the device.

    SWIFTBOX_CANN_VERSION overrides (for machines with an unusual layout)."""
    if os.environ.get("SWIFTBOX_CANN_VERSION"):
        return os.environ["SWIFTBOX_CANN_VERSION"], "SWIFTBOX_CANN_VERSION"
    for file in files if files is not None else cann_info_files():
        try:
            text = Path(file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = re.search(r"^\s*version\s*=\s*(\S+)", text, re.MULTILINE)
        if match:
            return match.group(1), file
    return None, "no ascend_toolkit_install.info found (is CANN installed and set_env.sh sourced?)"


# -- the check --------------------------------------------------------------------------------------

def _pip(*pins: str) -> str:
    return "pip install " + " ".join(pins)


def npu_pins(cann: str | None, matrix: dict | None = None, torch: str | None = None) -> list[str]:
    """torch==X torch_npu==Y for a CANN version: the newest torch, or the row matching `torch`."""
    matrix = matrix or load()
    rows = [r for r in matrix["npu_torch"] if cann_key(r["cann"]) == cann_key(cann)]
    if not rows:  # a CANN only vllm-ascend's table names (8.5.1, 9.0.1): the torch_npu its releases used
        rows = [{"torch": r["torch"], "torch_npu": base(r["torch_npu"])} for r in matrix["npu_vllm"]
                if cann_key(r["cann"]) == cann_key(cann)]
    if torch:
        rows = [r for r in rows if base(r["torch"]) == base(torch)] or rows
    if not rows:
        return []
    row = max(rows, key=lambda r: release(r["torch"]))
    return [f"torch=={row['torch']}", f"torch_npu=={row['torch_npu']}"]


def npu_vllm_pins(cann: str | None, matrix: dict | None = None) -> list[str]:
    """The newest vllm-ascend release tested on `cann`: torch, torch_npu, vllm, vllm-ascend (, triton-ascend)."""
    matrix = matrix or load()
    rows = [r for r in matrix["npu_vllm"] if cann_key(r["cann"]) == cann_key(cann)]
    if not rows:
        return []
    row = rows[0]  # the table lists the newest release first
    pins = [f"torch=={row['torch']}", f"torch_npu=={base(row['torch_npu'])}", f"vllm=={row['vllm'][-1]}",
            f"vllm-ascend=={row['vllm_ascend']}"]
    return pins + ([f"triton-ascend=={row['triton_ascend']}"] if row.get("triton_ascend") else [])


def _known_canns(matrix: dict) -> list[str]:
    return list(dict.fromkeys(r["cann"] for r in matrix["npu_torch"]))


def check_npu(v: dict, matrix: dict) -> list[Finding]:
    out: list[Finding] = []
    cann, torch, tnpu = v.get("cann"), v.get("torch"), v.get("torch_npu")
    if cann is None:
        out.append(Finding("unknown", "cann", "CANN version not found: " + v.get("cann_where", "no version file"),
                           "source /usr/local/Ascend/ascend-toolkit/set_env.sh (or set SWIFTBOX_CANN_VERSION)"))
    elif not npu_pins(cann, matrix):
        out.append(Finding("unknown", "cann", f"CANN {cann} is not in the table (known: "
                           f"{', '.join(_known_canns(matrix)[:8])}, ...); versions cannot be checked against it",
                           "use a CANN release listed in docs/devices.md", "torch-npu"))
    if tnpu is None:
        pins = npu_pins(cann, matrix, torch)
        out.append(Finding("error", "torch_npu", "torch_npu is not installed: the NPU cannot be used",
                           _pip(*pins) if pins else "install the torch_npu that matches your CANN (docs/devices.md)",
                           "torch-npu"))
    else:
        rows = [r for r in matrix["npu_torch"] if base(r["torch_npu"]) == base(tnpu)]
        if not rows:
            out.append(Finding("unknown", "torch_npu", f"torch_npu {tnpu} is not in the table", None, "torch-npu"))
        else:
            want_torch = rows[0]["torch"]
            canns = [r["cann"] for r in rows]
            if base(torch) != base(want_torch):
                other = npu_pins(cann, matrix, torch) if cann else []
                fix = _pip(f"torch=={want_torch}")
                if other and other[0] == f"torch=={base(torch)}":
                    fix += f"  (or keep torch {torch}: {_pip(other[1])})"
                out.append(Finding("error", "torch", f"torch_npu {tnpu} needs torch {want_torch}, found {torch}",
                                   fix, "torch-npu"))
            if cann and npu_pins(cann, matrix) and cann_key(cann) not in {cann_key(c) for c in canns}:
                pins = npu_pins(cann, matrix, torch)
                out.append(Finding("error", "torch_npu", f"torch_npu {tnpu} is built for CANN {', '.join(canns)}; "
                                   f"this machine has CANN {cann}", _pip(*pins), "torch-npu"))
            elif not any(f.status == "error" for f in out):
                out.append(Finding("ok", "torch_npu", f"torch {torch} + torch_npu {tnpu} match CANN "
                                   f"{', '.join(canns)}", None, "torch-npu"))
    out += _check_vllm_ascend(v, matrix)
    return out


def _check_vllm_ascend(v: dict, matrix: dict) -> list[Finding]:
    vllm, va = v.get("vllm"), v.get("vllm_ascend")
    if va is None:
        if vllm is None:
            return []
        rows = [r for r in matrix["npu_vllm"] if base(vllm) in map(base, r["vllm"])]
        fix = (_pip(f"vllm-ascend=={rows[0]['vllm_ascend']}") if rows
               else "install the vllm-ascend release for your vllm")
        return [Finding("error", "vllm_ascend", f"vllm {vllm} is installed without vllm-ascend: it cannot use the NPU",
                        fix, "vllm-ascend")]
    rows = [r for r in matrix["npu_vllm"] if base(r["vllm_ascend"]) == base(va)]
    if not rows:
        return [Finding("unknown", "vllm_ascend", f"vllm-ascend {va} is not in the table", None, "vllm-ascend")]
    row, out = rows[0], []
    if base(vllm) not in map(base, row["vllm"]):
        out.append(Finding("error", "vllm", f"vllm-ascend {va} pairs with vllm {' or '.join(row['vllm'])}, found "
                           f"{vllm or 'none'}", _pip(f"vllm=={row['vllm'][-1]}"), "vllm-ascend"))
    if base(v.get("torch")) != base(row["torch"]):
        out.append(Finding("error", "torch", f"vllm-ascend {va} needs torch {row['torch']}, found {v.get('torch')}",
                           _pip(f"torch=={row['torch']}", f"torch_npu=={base(row['torch_npu'])}"), "vllm-ascend"))
    elif base(v.get("torch_npu")) != base(row["torch_npu"]):
        status = "warn" if release(v.get("torch_npu")) == release(row["torch_npu"]) else "error"
        out.append(Finding(status, "torch_npu", f"vllm-ascend {va} was released with torch_npu {row['torch_npu']}, "
                           f"found {v.get('torch_npu')}", _pip(f"torch_npu=={base(row['torch_npu'])}"), "vllm-ascend"))
    if v.get("cann") and cann_key(v["cann"]) != cann_key(row["cann"]):
        out.append(Finding("warn", "cann", f"vllm-ascend {va} is tested on CANN {row['cann']}; this machine has "
                           f"CANN {v['cann']}", f"use CANN {row['cann']}, or the vllm-ascend release for your CANN "
                           "(docs/devices.md)", "vllm-ascend"))
    tri = row.get("triton_ascend")
    if tri and base(v.get("triton_ascend")) != base(tri):
        out.append(Finding("warn", "triton_ascend", f"vllm-ascend {va} was released with triton-ascend {tri}, found "
                           f"{v.get('triton_ascend') or 'none'}", _pip(f"triton-ascend=={tri}"), "vllm-ascend"))
    if not out:
        out.append(Finding("ok", "vllm_ascend", f"vllm-ascend {va} + vllm {vllm} + torch {v.get('torch')} match the "
                           f"vllm-ascend {row['vllm_ascend']} release", None, "vllm-ascend"))
    return out


def check_cuda(v: dict, matrix: dict) -> list[Finding]:
    out: list[Finding] = []
    vllm, torch = v.get("vllm"), v.get("torch")
    if vllm is not None:
        rows = [r for r in matrix["cuda_vllm"] if base(r["vllm"]) == base(vllm)]
        if not rows:
            out.append(Finding("unknown", "vllm", f"vllm {vllm} is not in the table; it pins the torch it was built "
                               "with (pip show vllm)", None))
        elif release(torch)[:2] != release(rows[0]["torch"])[:2]:
            same = [r for r in matrix["cuda_vllm"] if release(r["torch"])[:2] == release(torch)[:2]]
            fix = _pip(f"torch=={rows[0]['torch']}")
            if same:
                fix += f"  (or keep torch {torch}: {_pip('vllm==' + same[0]['vllm'])})"
            out.append(Finding("error", "vllm", f"vllm {vllm} is built against torch {rows[0]['torch']}, found {torch}",
                               fix, rows[0]["source"]))
        else:
            out.append(Finding("ok", "vllm", f"vllm {vllm} + torch {torch}", None, rows[0]["source"]))
    out += check_floors(v, matrix)
    return out


def check_floors(v: dict, matrix: dict) -> list[Finding]:
    out = []
    for floor in matrix["floors"]:
        got = v.get(floor["package"])
        if got is None:
            continue
        if at_least(got, floor["min"]):
            out.append(Finding("ok", floor["package"], f"{floor['package']} {got} >= {floor['min']}", None,
                               floor["source"]))
        else:
            out.append(Finding("error", floor["package"], f"{floor['package']} {got} is older than {floor['min']} "
                               f"({floor['for']})", _pip(f"'{floor['package'].replace('_', '-')}>={floor['min']}'"),
                               floor["source"]))
    return out


def check(installed: dict, platform_name: str, matrix: dict | None = None) -> list[Finding]:
    """Findings for `installed` (package -> version or None; "cann" for the toolkit) on `platform_name`.

    The NPU checks also run on a machine that has torch_npu or CANN but resolved to another platform:
    that is exactly the machine whose NPU is "not used"."""
    matrix = matrix or load()
    npu_like = platform_name == "npu" or installed.get("torch_npu") or installed.get("cann")
    if npu_like:
        return check_npu(installed, matrix) + check_floors({k: installed.get(k) for k in ("torch",)}, matrix)
    if platform_name == "cuda" or installed.get("vllm"):
        return check_cuda(installed, matrix)
    return check_floors(installed, matrix)


def main(argv: list[str]) -> int:
    if argv[:1] == ["cann"]:
        version, where = cann_version()
        if version is None:
            print(where, file=sys.stderr)
            return 1
        print(version)
        return 0
    if argv[:1] == ["pins"] and len(argv) in (2, 3):
        pins = npu_vllm_pins(argv[1]) if argv[2:] == ["--vllm"] else npu_pins(argv[1])
        if not pins:
            print(f"no torch/torch_npu set known for CANN {argv[1]!r}", file=sys.stderr)
            return 1
        print(" ".join(pins))
        return 0
    print("usage: compat_matrix.py cann | pins CANN_VERSION [--vllm]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
