"""The CPU's training memory set-up (swiftbox/device/cpu.py `training_memory`): freed tensors go back to the OS (mmap
mode at once; trim mode when the free heap passes the budget), a bad SWIFTBOX_CPU_MALLOC is one clear error."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# a child process: mallopt changes the whole process's allocator, and the test must see RSS fall after a free
CHILD = """
import sys, torch
sys.path.insert(0, {root!r})
from swiftbox.device.cpu import CpuPlatform

def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1]) * 1024

if sys.argv[1] == 'mmap':
    assert CpuPlatform().training_memory().startswith('malloc: mmap threshold')
# glibc's dynamic threshold: after one large mmapped free, smaller tensors come from the heap and stay resident
big = torch.ones(30 << 20, dtype=torch.uint8); del big    # below the 32 MiB cap of the dynamic threshold
many = [torch.ones(16 << 20, dtype=torch.uint8) for _ in range(24)]    # 384 MiB in 16 MiB tensors
held = rss()
for i in range(0, 24, 2):
    many[i] = None                                                    # every other one freed: heap holes
if sys.argv[1] == 'trim':
    from swiftbox.device.cpu import trim_freed_memory
    assert trim_freed_memory() is True
print(round((held - rss()) / 2**20))
"""

# trim mode's rule (HeapCap): the holes stay resident while the resident set is within the run's peak in use + the
# budget, and go back once allocations that cannot reuse them push it past
CAP_CHILD = """
import sys, torch
sys.path.insert(0, {root!r})
from swiftbox.device.cpu import HeapCap

def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1]) * 1024

big = torch.ones(30 << 20, dtype=torch.uint8); del big    # glibc's dynamic threshold up: the tensors below use the heap
cap = HeapCap(budget=64 << 20)
many = [torch.ones(16 << 20, dtype=torch.uint8) for _ in range(24)]
at_peak = cap.check()                                     # a check point at the peak (training: after every layer)
for i in range(0, 24, 2):
    many[i] = None                                        # 192 MiB of holes, within the run's own peak
first = at_peak or cap.check()
wider = [torch.ones(20 << 20, dtype=torch.uint8) for _ in range(10)]   # cannot reuse 16 MiB holes: the heap grows
before = rss()
second = cap.check()
print(first, second, round((before - rss()) / 2**20))
"""


def _freed_mib(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_CPU_MALLOC"}
    if mode in ("mmap", "default"):
        env["SWIFTBOX_CPU_MALLOC"] = mode
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), mode], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.split()[-1])


def test_freed_tensors_return_to_the_os_under_the_training_set_up():
    assert _freed_mib("mmap") >= 150          # 12 x 16 MiB freed: given back at once
    assert _freed_mib("default") < 100        # glibc's default keeps the holes resident


def test_trim_hands_the_holes_back():
    assert _freed_mib("trim") >= 150          # 192 MiB of holes: given back by malloc_trim
    # kept while within the run's peak: test_trim_mode_keeps_reusable_holes_and_returns_them_past_the_peak


def test_trim_mode_keeps_reusable_holes_and_returns_them_past_the_peak():
    proc = subprocess.run([sys.executable, "-c", CAP_CHILD.format(root=str(ROOT))], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second, freed = proc.stdout.split()
    assert (first, second) == ("False", "True")
    assert int(freed) >= 150


def test_bad_malloc_mode_is_one_clear_error(monkeypatch):
    from swiftbox.device.cpu import MALLOC_ENV, CpuPlatform
    from swiftbox.errors import UserError

    monkeypatch.setenv(MALLOC_ENV, "jemalloc")
    with pytest.raises(UserError, match="SWIFTBOX_CPU_MALLOC: expected auto, trim, mmap, default, got 'jemalloc'"):
        CpuPlatform().training_memory()
    monkeypatch.setenv(MALLOC_ENV, "default")
    assert CpuPlatform().training_memory() is None
