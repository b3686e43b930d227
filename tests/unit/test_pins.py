"""The version lock (swiftbox/constraints/, swiftbox/pins.py): it names the exact versions of the stack, every
pin is installable under pyproject.toml's own requirements, the torch-bound set is locked on CPU only, and
doctor lists an installed version that differs from it."""
from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from swiftbox import pins
from tests.conftest import ROOT

STACK = ("transformers", "tokenizers", "trl", "peft", "accelerate", "gptqmodel", "bitsandbytes", "gguf", "datasets",
         "safetensors", "fastapi", "uvicorn", "openai", "huggingface-hub", "modelscope", "pydantic")


def _all(path_name: str) -> dict[str, pins.Pin]:
    return {p.name: p for p in pins.read(pins.LOCK_DIR / path_name)}


def test_the_lock_names_an_exact_version_of_every_library_of_the_stack():
    common, cpu = _all(pins.COMMON), _all(pins.CPU)
    assert [name for name in STACK if name not in common] == []
    assert set(pins.TORCH_BOUND) == set(cpu)                 # torch, torchao, numpy: CPU only
    assert not set(pins.TORCH_BOUND) & set(common)           # CUDA / NPU keep the torch they find
    assert "swiftbox" not in common and "pip" not in common
    for pin in [*common.values(), *cpu.values()]:
        assert "+" not in pin.version and pin.version[0].isdigit(), pin   # no local label (+cpu): one lock for all


def test_every_pin_satisfies_pyprojects_own_requirements():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra
             if not r.startswith("swiftbox")]
    locked = {**_all(pins.COMMON), **_all(pins.CPU)}
    wrong = [f"{r} vs {locked[pins.canonical(r.name)].version}" for r in reqs
             if pins.canonical(r.name) in locked
             and not r.specifier.contains(locked[pins.canonical(r.name)].version, prereleases=True)]
    assert wrong == []
    assert locked["gptqmodel"].version == "7.6.0"        # the pyproject pin (7.7.0 needs torch >= 2.14.1)


def test_install_sh_installs_the_locks_torch_on_a_cpu_machine():
    torch = _all(pins.CPU)["torch"].version
    text = (ROOT / "install.sh").read_text()
    assert "swiftbox/constraints" in text and "cpu.txt" in text
    assert pins.same(f"{torch}+cpu", torch) and not pins.same("2.12.0+cpu", torch)


def test_a_pin_for_a_newer_python_carries_a_marker_and_floats_elsewhere():
    common, cpu = pins.pins_from([("Transformers", "5.24.0", ">=3.11.0"), ("tokenizers", "0.23.3", ">=3.10"),
                                  ("torch", "2.13.0+cpu", ">=3.10"), ("swiftbox", "0.1.0", ">=3.10"),
                                  ("networkx", "3.6.1", "!=3.14.1,>=3.11"), ("tzdata", "2026.6", ">=2")])
    assert [p.line() for p in common] == ['networkx==3.6.1; python_version >= "3.11"', "tokenizers==0.23.3",
                                          'transformers==5.24.0; python_version >= "3.11"', "tzdata==2026.6"]
    assert [p.line() for p in cpu] == ["torch==2.13.0"]
    assert pins.applies(pins.Pin("x", "1", 'python_version >= "3.10"'))
    assert not pins.applies(pins.Pin("x", "1", 'python_version >= "9.0"'))


def test_differences_name_the_package_the_installed_and_the_locked_version():
    locked = pins.locked("cpu")
    installed = {"Transformers": "0.0.1", "torch": locked["torch"] + "+cpu", "tokenizers": locked["tokenizers"],
                 "numpy": "1.0.0"}
    cpu = pins.differences("cpu", installed)
    assert cpu == [{"name": "numpy", "installed": "1.0.0", "locked": locked["numpy"]},
                   {"name": "transformers", "installed": "0.0.1", "locked": locked["transformers"]}]
    # on an accelerator the torch-bound set follows the torch found there: not a difference
    assert [d["name"] for d in pins.differences("npu", installed)] == ["transformers"]


def test_doctor_reports_the_lock_and_a_drifted_package(monkeypatch, capsys):
    from swiftbox.device import doctor

    real = pins.installed_versions()
    monkeypatch.setattr(pins, "installed_versions", lambda: {**real, "peft": "0.0.1"})
    info = doctor.collect("cpu")
    assert info["lock"]["files"] == ["swiftbox/constraints/common.txt", "swiftbox/constraints/cpu.txt"]
    assert {"name": "peft", "installed": "0.0.1", "locked": pins.locked("cpu")["peft"]} in info["lock"]["differs"]
    doctor.doctor(device="cpu")
    shown = capsys.readouterr().out
    assert "differs from the version lock" in shown and "0.0.1" in shown

