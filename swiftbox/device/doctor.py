"""`./launch.sh doctor`: what swiftbox sees - platform, devices, memory, dtype, capabilities, versions,
why each other platform is not available, and the installed versions checked against the known-good
sets in compat_matrix.json (with the pip command that fixes a mismatch), and the installed packages whose
version differs from the lock install.sh applies (swiftbox/constraints/, swiftbox/pins.py). `--json` for
scripts (its "compatible" field is false on a known mismatch; "lock" lists the differences); the exit code
stays 0 - doctor reports, it does not fail.
"""
from __future__ import annotations

import os

from swiftbox.device import BF16_ENV, bf16_mode
from swiftbox.device.base import Platform
from swiftbox.device.dtype_policy import policy_rows
from swiftbox.versions import package_version

LIBRARIES = ("torch", "torch_npu", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "gptqmodel",
             "vllm", "vllm_ascend", "triton_ascend", "flash_attn", "deepspeed", "modelscope", "huggingface_hub",
             "fastapi", "uvicorn", "llama_cpp_python", "gguf")


def installed_versions() -> dict[str, str | None]:
    """Package -> installed version (None: not installed), plus "cann" / "cann_where" for the toolkit."""
    from swiftbox.device.compat_matrix import cann_version

    versions: dict[str, str | None] = {lib: package_version(lib) for lib in LIBRARIES}
    versions["cann"], versions["cann_where"] = cann_version()
    return versions


def collect(device: str | None = None, versions: dict | None = None) -> dict:
    from swiftbox.device import broken_backends, current_platform, detect, unavailable_reasons
    from swiftbox.device.compat_matrix import check

    platform = current_platform(device)
    count = platform.device_count()
    devices = []
    for i in range(count):
        mem = platform.memory(i)
        devices.append({"index": i, "name": platform.device_name(i),
                        "total_gib": round(mem.total_bytes / 2**30, 2) if mem.total_bytes else None,
                        "free_gib": round(mem.free_bytes / 2**30, 2) if mem.free_bytes else None})
    versions = versions if versions is not None else installed_versions()
    findings = check(versions, platform.name)
    info = {
        "platform": platform.name,
        "detected": detect(),
        "unavailable": unavailable_reasons(),
        "device_count": count,
        "devices": devices,
        "dtype": platform.default_dtype(),
        "cpu_bf16": bf16_mode(),
        "dtype_policy": policy_rows(platform),
        "dist_backend": platform.dist_backend,
        "capabilities": platform.capability_matrix(),
        "versions": {k: v or ("not found" if k == "cann" else "not installed")
                     for k, v in versions.items() if k != "cann_where"},
        "cann_where": versions.get("cann_where"),
        "runtime": _safe_versions(platform),
        "compatibility": [f.as_dict() for f in findings],
        "compatible": not any(f.status == "error" for f in findings),
        "lock": lock_report(platform.name),
        "env": {k: os.environ[k] for k in sorted(set(platform.default_env) | {"SWIFTBOX_DEVICE", BF16_ENV,
                platform.visible_devices_env or "", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) if k in os.environ},
    }
    info["llama_cpp"] = _llama_cpp()
    if "npu" in broken_backends():
        info["torch_npu_error"] = broken_backends()["npu"]
    return info


def lock_report(platform_name: str) -> dict:
    """The lock files install.sh applies here and the installed packages whose version differs from them."""
    from swiftbox import pins

    files = pins.files_for(platform_name)
    try:
        differs = pins.differences(platform_name)
    except (OSError, ValueError) as exc:   # a missing or hand-broken lock file must not break the report
        return {"files": [f"swiftbox/constraints/{f.name}" for f in files], "error": str(exc), "differs": []}
    return {"files": [f"swiftbox/constraints/{f.name}" for f in files], "differs": differs}


def _llama_cpp() -> dict:
    """Where GGUF export's llama.cpp tree is and how long its build took (swiftbox.export.llamacpp.setup's
    build.json)."""
    import json

    from swiftbox.export.llamacpp import cache_dir, tree

    found = tree()
    try:
        build = json.loads((cache_dir() / "build.json").read_text())
    except (OSError, ValueError):
        build = None
    return {"converter": str(found) if found else None,
            "build_minutes": round(build["seconds"] / 60, 1) if build and "seconds" in build else None}


def _safe_versions(platform: Platform) -> dict[str, str]:
    try:
        return platform.versions()
    except Exception as exc:  # a half-installed runtime must not break the report about it
        return {"error": f"{type(exc).__name__}: {exc}"}


STATUS_STYLE = {"ok": "green", "warn": "yellow", "error": "red", "unknown": "yellow"}


def doctor(as_json: bool = False, device: str | None = None, versions: dict | None = None) -> int:
    from swiftbox.tables import console as make_console
    from swiftbox.tables import print_json

    info = collect(device, versions)
    if as_json:
        print_json(info)
        return 0
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    console.print(f"[bold]platform[/bold] {info['platform']}   detected: {', '.join(info['detected'])}   "
                  f"devices: {info['device_count']}   dtype: {info['dtype']}   backend: {info['dist_backend']}")
    for dev in info["devices"]:
        console.print(f"  [{dev['index']}] {escape(str(dev['name']))}  memory {dev['free_gib']} / {dev['total_gib']} "
                      "GiB free")
    for name, why in info["unavailable"].items():
        console.print(f"  {name}: not available - {escape(why)}")
    caps = Table(title="capabilities", title_justify="left")
    caps.add_column("feature")
    caps.add_column("available")
    for feature, status in info["capabilities"].items():
        caps.add_row(feature, escape(status))
    console.print(caps)
    policy = Table(title=f"dtype policy (swiftbox/device/dtype_policy.py; {BF16_ENV}={info['cpu_bf16']})",
                   title_justify="left")
    for col in ("step", "compute", "save", "check (relative |Δlogit| tolerance)"):
        policy.add_column(col)
    for row in info["dtype_policy"]:
        checked = f"{row['check']} ({row['tolerance']:g})" if row["check"] else "-"
        policy.add_row(escape(row["step"]), row["compute"], escape(row["save"] or "-"), checked)
    console.print(policy)
    libs = Table(title="libraries", title_justify="left")
    libs.add_column("package")
    libs.add_column("version")
    for lib, version in {**info["versions"], **info["runtime"]}.items():
        libs.add_row(lib, escape(str(version)))
    console.print(libs)
    gguf = info["llama_cpp"]
    console.print(f"  llama.cpp converter (gguf): {escape(gguf['converter'] or 'not fetched yet')}"
                  + (f", bindings built in {gguf['build_minutes']} min" if gguf["build_minutes"] else ""))
    if info["cann_where"] and info["versions"].get("cann"):
        console.print(f"  CANN {info['versions']['cann']} (from {escape(info['cann_where'])})")
    check = Table(title="version check (swiftbox/device/compat_matrix.json)", title_justify="left")
    for col in ("status", "what", "finding", "fix"):
        check.add_column(col)
    for f in info["compatibility"]:
        style = STATUS_STYLE.get(f["status"], "")
        check.add_row(f"[{style}]{f['status']}[/{style}]", f["component"], escape(f["message"]),
                      escape(f["fix"] or ""))
    console.print(check)
    lock = info["lock"]
    where = " + ".join(lock["files"])
    if lock.get("error"):
        console.print(f"[yellow]version lock ({escape(where)}): unreadable - {escape(lock['error'])}[/yellow]")
    elif not lock["differs"]:
        console.print(f"version lock ({escape(where)}): every installed package is at its locked version")
    else:
        drift = Table(title=f"differs from the version lock ({where}; ./install.sh re-applies it, "
                            "SWIFTBOX_FLOAT=1 installs float on purpose)", title_justify="left")
        for col in ("package", "installed", "locked"):
            drift.add_column(col)
        for d in lock["differs"]:
            drift.add_row(d["name"], escape(d["installed"]), escape(d["locked"]))
        console.print(drift)
    for key, value in info["env"].items():
        console.print(f"  {key}={escape(value)}")
    return 0
