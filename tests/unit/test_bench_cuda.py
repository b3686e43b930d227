"""bench cuda (the GPU campaign): its packing and requirement walk here, and in the slow suite the whole
campaign in dry mode on the CPU - every part started with tiny settings - so it is tested before a GPU is."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import cuda as campaign  # noqa: E402  (bench/cuda.py)


def fake_wheel(folder, name, requires=()):
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        z.writestr(f"{name}-1.0.dist-info/METADATA", meta + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return path


def sized(folder, name, size):
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with open(path, "wb") as fh:
        fh.truncate(size)      # sparse: packing reads only the size
    return path


def test_requirements_follow_linux_py312_markers(tmp_path):
    wheel = fake_wheel(tmp_path, "demo", ["numpy>=2", "pywin32; sys_platform == 'win32'", "rich; extra == 'pretty'",
                                          "tomli; python_version < '3.11'", "Typing_Extensions>=4"])
    assert campaign.wheel_requires(wheel) == ["numpy", "typing-extensions"]


def test_groups_pack_under_the_limit_and_too_large_is_named(tmp_path):
    mib = 2 ** 20
    groups = {"big": [sized(tmp_path, "big", 70 * mib)],
              "a": [sized(tmp_path, "a", 30 * mib), sized(tmp_path, "a_dep", 10 * mib)],
              "b": [sized(tmp_path, "b", 20 * mib)], "c": [sized(tmp_path, "c", 15 * mib)]}
    batches, too_large = campaign.pack(groups, 56 * mib)
    assert list(too_large) == ["big"]
    assert all(b["bytes"] <= 56 * mib for b in batches)
    packed = sorted(r for b in batches for r in b["roots"])
    assert packed == ["a", "b", "c"] and len(batches) == 2          # a+dep (40) + c (15); b (20)
    assert campaign.skipped_parts(["bitsandbytes"]) == {"bitsandbytes": ["qlora tests"]}


def test_roots_are_swiftbox_requirements_with_extras_expanded():
    roots = campaign.roots_from_pyproject()
    for name in ("torch", "trl", "bitsandbytes", "gptqmodel", "fastapi", "pytest"):
        assert name in roots
    assert "swiftbox" not in roots


BAD = [(["run", "--parts", "env,nope"], "nope"), ([], "cmd"), (["run", "--budget", "x"], "x"),
       (["plan", "--dest", "/nonexistent"], "prepare")]


@pytest.mark.parametrize("argv, word", BAD)
def test_bad_input_is_one_line_exit_2(argv, word):
    script = str(ROOT / "bench" / "cuda.py")
    r = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and word in r.stderr, r.stderr


@pytest.mark.slow
def test_dry_campaign_runs_every_part_on_cpu(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "cuda.py"), "run", "--dry", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=1500)
    results = json.loads((tmp_path / "results.json").read_text())
    parts = results["parts"]
    assert list(parts) == list(campaign.PART_NEEDS)
    assert r.returncode == 0, {k: (v["status"], v.get("tail", "")[-400:]) for k, v in parts.items()}
    assert parts["env"]["metrics"]["platform"] == "cpu"
    assert parts["train"]["tests"]["collected"] >= 5 and parts["export"]["tests"]["collected"] >= 5
    assert [s["step"] for s in parts["quickstart"]["steps"]][-2:] == ["serve", "verify"]
    assert parts["sft"]["metrics"]["ratio"] > 0 and parts["serve"]["metrics"]["sequential"]["output_tokens"] > 0
    for name in parts:
        assert (tmp_path / f"{name}.log").is_file()
