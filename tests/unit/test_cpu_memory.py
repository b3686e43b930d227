"""The CPU's training memory set-up (swiftbox/device/cpu.py `training_memory`): freed tensors go back to the OS, a
bad SWIFTBOX_CPU_MALLOC is one clear error."""
from __future__ import annotations

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

if sys.argv[1] == 'auto':
    assert CpuPlatform().training_memory().startswith('malloc: mmap threshold')
# glibc's dynamic threshold: after one large mmapped free, smaller tensors come from the heap and stay resident
big = torch.ones(30 << 20, dtype=torch.uint8); del big    # below the 32 MiB cap of the dynamic threshold
many = [torch.ones(16 << 20, dtype=torch.uint8) for _ in range(24)]    # 384 MiB in 16 MiB tensors
held = rss()
for i in range(0, 24, 2):
    many[i] = None                                                    # every other one freed: heap holes
print(round((held - rss()) / 2**20))
"""


def _freed_mib(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), mode], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.split()[-1])


def test_freed_tensors_return_to_the_os_under_the_training_set_up():
    assert _freed_mib("auto") >= 150          # 12 x 16 MiB freed: given back
    assert _freed_mib("default") < 100        # glibc's default keeps the holes resident


def test_bad_malloc_mode_is_one_clear_error(monkeypatch):
    from swiftbox.device.cpu import MALLOC_ENV, CpuPlatform
    from swiftbox.errors import UserError

    monkeypatch.setenv(MALLOC_ENV, "jemalloc")
    with pytest.raises(UserError, match="SWIFTBOX_CPU_MALLOC: expected auto or default, got 'jemalloc'"):
        CpuPlatform().training_memory()
    monkeypatch.setenv(MALLOC_ENV, "default")
    assert CpuPlatform().training_memory() is None
