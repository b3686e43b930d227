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
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", "auto")
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\n{line}\n\nprocessor\t: 1\n{line}\n")
    monkeypatch.setattr(cpu, "CPUINFO", str(info))
    assert cpu.CpuPlatform().bf16_native() is native


def test_no_cpuinfo_means_no_native_bf16(tmp_path, monkeypatch):
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", "auto")
    monkeypatch.setattr(cpu, "CPUINFO", str(tmp_path / "missing"))
    assert cpu.cpu_flags() == set() and cpu.CpuPlatform().bf16_native() is False


@pytest.mark.parametrize(("mode", "flags", "native"), [
    ("on", "fpu avx2", True), ("off", "avx512_bf16 amx_bf16", False), ("auto", "avx2", False),
    ("auto", "amx_bf16", True), (" ON ", "avx2", True), ("", "avx2", False),
])
def test_swiftbox_cpu_bf16_forces_the_native_answer(tmp_path, monkeypatch, mode, flags, native):
    """SWIFTBOX_CPU_BF16=on makes any CPU behave as a bf16-native one (the bf16 policy is then tested on an AVX2
    box), off makes an AMX machine compute in fp32, auto (or unset) reads the flags."""
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(cpu, "CPUINFO", str(info))
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", mode)
    platform = cpu.CpuPlatform()
    assert platform.bf16_native() is native
    assert platform.default_dtype() == ("bfloat16" if native else "float32")
    assert platform.training_args(platform.default_dtype())["bf16"] is native
    assert (f"SWIFTBOX_CPU_BF16={mode.strip().lower()}" in platform.versions()["native_bf16"]) is (
        mode.strip().lower() in ("on", "off"))


def test_a_bad_swiftbox_cpu_bf16_is_one_line_exit_2(monkeypatch, cli):
    from swiftbox.errors import UserError

    monkeypatch.setenv("SWIFTBOX_CPU_BF16", "yes")
    with pytest.raises(UserError, match="SWIFTBOX_CPU_BF16: expected one of auto, on, off, got 'yes'"):
        cpu.CpuPlatform().default_dtype()
    for command in (["doctor"], ["models"], ["test", "--no-lint", "tests/unit/test_device_bf16.py"]):
        res = cli(*command, env={"SWIFTBOX_CPU_BF16": "yes"})
        assert res.returncode == 2 and res.stderr.strip().splitlines() == [
            "swiftbox: SWIFTBOX_CPU_BF16: expected one of auto, on, off, got 'yes'"], (command, res.stderr)
