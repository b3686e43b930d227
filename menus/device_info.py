"""The device facts the menu shows and decides with, resolved off the first paint's critical path.

Resolving the platform imports torch (2-3 s), so the menu starts a background thread for it once
it has painted; the header says "detecting" until the facts arrive, and flows that need a decision
(which methods to offer) wait for it. Platform names come from the platform object, never literals.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class DeviceFacts:
    name: str
    count: int
    memory_gib: Optional[float]        # total memory of device 0 (RAM on CPU)
    free_gib: Optional[float]
    dtype: str
    refusals: dict = field(default_factory=dict)   # feature -> "why; use X instead"
    platform: Any = None                           # the Platform itself (None in tests that only fake the facts)

    def why_not(self, feature: str) -> Optional[str]:
        return self.refusals.get(feature)

    def header(self) -> str:
        mem = f"{self.memory_gib:.0f} GiB" if self.memory_gib else "memory unknown"
        free = f" ({self.free_gib:.0f} free)" if self.free_gib else ""
        plural = "s" if self.count != 1 else ""
        return f"{self.name} · {self.count} device{plural} · {mem}{free} · {self.dtype}"


MENU_FEATURES = ("qlora-bnb", "vllm", "multi-device")     # and every quantization method's (swiftbox/quant_methods.py)


def menu_features() -> tuple[str, ...]:
    from swiftbox import quant_methods

    return (*MENU_FEATURES, *quant_methods.features())


def collect() -> DeviceFacts:
    from swiftbox.device import current_platform

    platform = current_platform()
    mem = platform.memory(0)
    refusals = {}
    for feature in menu_features():
        refusal = platform.why_not(feature)
        if refusal is not None:
            refusals[feature] = f"{refusal.why}; use {refusal.instead}"
    gib = (lambda b: b / 2**30 if b else None)
    return DeviceFacts(name=platform.name, count=platform.device_count(), memory_gib=gib(mem.total_bytes),
                       free_gib=gib(mem.free_bytes), dtype=platform.default_dtype(), refusals=refusals,
                       platform=platform)


class DeviceProbe:
    """Collects DeviceFacts in a daemon thread; `facts()` waits for them, `header()` never waits."""

    def __init__(self, collector=collect):
        self._collector = collector
        self._facts: Optional[DeviceFacts] = None
        self._error: Optional[str] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> DeviceProbe:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="swiftbox-device-probe", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._facts = self._collector()
        except Exception as exc:  # the menu must still work; flows then offer everything with no estimate
            self._error = " ".join(str(exc).split()) or type(exc).__name__

    @property
    def ready(self) -> bool:
        return self._facts is not None or self._error is not None

    def facts(self, timeout: Optional[float] = None) -> Optional[DeviceFacts]:
        self.start()
        self._thread.join(timeout)
        return self._facts

    def header(self) -> str:
        if self._facts is not None:
            return self._facts.header()
        if self._error is not None:
            return f"device unknown ({self._error})"
        requested = os.environ.get("SWIFTBOX_DEVICE")
        return f"detecting device{' ' + requested if requested else ''}…"

    def why_not(self, feature: str) -> Optional[str]:
        facts = self.facts()
        return facts.why_not(feature) if facts else None


def static_probe(facts: DeviceFacts) -> DeviceProbe:
    """A probe that already knows its answer (tests, and flows run outside the main menu)."""
    probe = DeviceProbe(collector=lambda: facts)
    probe._facts = facts
    probe._thread = threading.Thread(target=lambda: None)
    probe._thread.start()
    return probe
