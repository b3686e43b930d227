"""`./launch.sh doctor`: what swiftbox sees - platform, devices, memory, dtype, capabilities, versions."""
from __future__ import annotations

import json
import os

from swiftbox.device.base import Platform
from swiftbox.versions import package_version

LIBRARIES = ("torch", "torch_npu", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "gptqmodel",
             "vllm", "vllm_ascend", "deepspeed", "modelscope", "huggingface_hub", "fastapi", "uvicorn")


def collect(device: str | None = None) -> dict:
    from swiftbox.device import broken_backends, current_platform, detect

    platform = current_platform(device)
    count = platform.device_count()
    devices = []
    for i in range(count):
        mem = platform.memory(i)
        devices.append({"index": i, "name": platform.device_name(i),
                        "total_gib": round(mem.total_bytes / 2**30, 2) if mem.total_bytes else None,
                        "free_gib": round(mem.free_bytes / 2**30, 2) if mem.free_bytes else None})
    info = {
        "platform": platform.name,
        "detected": detect(),
        "device_count": count,
        "devices": devices,
        "dtype": platform.default_dtype(),
        "dist_backend": platform.dist_backend,
        "capabilities": platform.capability_matrix(),
        "versions": {lib: package_version(lib) or "not installed" for lib in LIBRARIES},
        "runtime": _safe_versions(platform),
        "env": {k: os.environ[k] for k in sorted(set(platform.default_env) | {"SWIFTBOX_DEVICE",
                platform.visible_devices_env or "", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) if k in os.environ},
    }
    if "npu" in broken_backends():
        info["torch_npu_error"] = broken_backends()["npu"]
    return info


def _safe_versions(platform: Platform) -> dict[str, str]:
    try:
        return platform.versions()
    except Exception as exc:  # a half-installed runtime must not break the report about it
        return {"error": f"{type(exc).__name__}: {exc}"}


def doctor(as_json: bool = False, device: str | None = None) -> int:
    info = collect(device)
    if as_json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]platform[/bold] {info['platform']}   detected: {', '.join(info['detected'])}   "
                  f"devices: {info['device_count']}   dtype: {info['dtype']}   backend: {info['dist_backend']}")
    for dev in info["devices"]:
        console.print(f"  [{dev['index']}] {dev['name']}  memory {dev['free_gib']} / {dev['total_gib']} GiB free")
    if "torch_npu_error" in info:
        console.print(f"[yellow]torch_npu is installed but unusable: {info['torch_npu_error']}[/yellow]")
    caps = Table(title="capabilities")
    caps.add_column("feature")
    caps.add_column("available")
    for feature, status in info["capabilities"].items():
        caps.add_row(feature, status)
    console.print(caps)
    libs = Table(title="libraries")
    libs.add_column("package")
    libs.add_column("version")
    for lib, version in {**info["versions"], **info["runtime"]}.items():
        libs.add_row(lib, version)
    console.print(libs)
    for key, value in info["env"].items():
        console.print(f"  {key}={value}")
    return 0
