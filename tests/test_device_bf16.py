"""Native bf16 on a CPU is read from the kernel's CPU flags (an AVX2-only EPYC has none; AMX/AVX512_BF16 or
Arm's bf16 do), so serve and the benches can say whether bf16 is a speed option here or only a storage one."""
from __future__ import annotations

import pytest

from swiftbox.device import cpu


@pytest.mark.parametrize(("line", "native"), [
    ("flags\t\t: fpu sse2 avx avx2 fma", False),
    ("flags\t\t: fpu avx2 avx512f avx512_bf16", True),
    ("flags\t\t: fpu avx2 amx_bf16 amx_tile", True),
    ("Features\t: fp asimd bf16 i8mm", True),
])
def test_bf16_native_follows_the_cpu_flags(tmp_path, monkeypatch, line, native):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\n{line}\n\nprocessor\t: 1\n{line}\n")
    monkeypatch.setattr(cpu, "CPUINFO", str(info))
    assert cpu.CpuPlatform().bf16_native() is native


def test_no_cpuinfo_means_no_native_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "CPUINFO", str(tmp_path / "missing"))
    assert cpu.cpu_flags() == set() and cpu.CpuPlatform().bf16_native() is False
