"""The QuantMethod record is the one home of a quantization method: registering a record (and nothing else) makes a
method that the schema accepts, the device check answers for, engine fit places, the menu offers and the quantize
step dispatches to its writer - the proof that a new method is the record, its writer, docs and a test
(docs/architecture.md, "How to add a quantization method")."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from menus.device_info import DeviceFacts
from menus.widgets import BACK
from swiftbox import quant_methods
from swiftbox.quant_methods import Layout, Loader, QuantMethod
from tests.fakes.menu_keys import DOWN, ENTER, ESC, FACTS, keys, make_session

CALLS: list[str] = []


def _write(cfg, spec, ctx, tokenizer, calib, dtype, group_size) -> dict:
    """The fake method's writer: 'quantizes' by copying the source (its layout is the plain weight)."""
    CALLS.append(cfg.method)
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(Path(spec.base) / name, Path(ctx.work_dir) / name)
    return {"tool": "copy"}


def _whole_step(cfg, ctx):
    from swiftbox.contract import StepResult

    CALLS.append(f"{cfg.method} step")
    return StepResult(metrics={"bits": cfg.bits}, info={"artifact": "model"})


SAME = {"min_cosine": 0.999, "min_argmax_agreement": 0.99, "max_perplexity_ratio": 1.01, "max_accuracy_drop": 0.0,
        "max_size_ratio": 1.01}
FAKE = QuantMethod(
    "fake4", "Fake", (3, 4), "fake4 (a test's)", "Fake 3/4-bit", feature="fake4", package="json",
    writer=f"{__name__}:_write", tolerances={3: SAME, 4: SAME},
    layouts={b: Layout("{m}.weight", ("F32", "BF16", "F16"), "{m}.weight") for b in (3, 4)},
    quant_method="fake_q", engines=("builtin",),
    loads_with=(Loader("transformers"), Loader("fakelib", ("no_such_module_for_swiftbox",))))


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(quant_methods.METHODS, FAKE.name, FAKE)
    CALLS.clear()
    return FAKE


def test_the_schema_accepts_a_registered_method_with_its_bits(fake):
    from pydantic import ValidationError

    from swiftbox.steps import QuantizeStep

    assert QuantizeStep(method="fake4").bits == 3                   # the first of its bits is the default
    assert QuantizeStep(method="fake4", bits=4).bits == 4
    with pytest.raises(ValidationError, match="5 is not available with method fake4; expected 3 or 4"):
        QuantizeStep(method="fake4", bits=5)
    with pytest.raises(ValidationError, match="'gguf' or 'fake4'"):
        QuantizeStep(method="nope")


def test_an_unregistered_method_is_refused_like_a_literal():
    from pydantic import ValidationError

    from swiftbox.steps import QuantizeStep

    with pytest.raises(ValidationError) as err:
        QuantizeStep(method="fake4")
    assert err.value.errors()[0]["type"] == "literal_error"
    assert err.value.errors()[0]["msg"] == "Input should be 'gptq', 'awq', 'bnb', 'fp8' or 'gguf'"


def test_the_device_check_answers_for_its_capability(fake):
    from swiftbox.device import CpuPlatform
    from swiftbox.errors import Unsupported

    cpu = CpuPlatform()
    assert cpu.why_not("fake4") is None and cpu.supports("fake4")       # its package (json) imports
    assert cpu.capability_matrix()["fake4"] == "yes"
    quant_methods.METHODS["fake4"] = replace(FAKE, package="no_such_package_for_swiftbox")
    refusal = cpu.why_not("fake4")
    assert refusal is not None and refusal.instead == "pip install no-such-package-for-swiftbox"
    with pytest.raises(Unsupported, match="fake4 is not available on cpu"):
        cpu.require("fake4")


def test_engine_fit_reads_the_engines_it_lists(fake, tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.device.base import Platform
    from swiftbox.serving import fit
    from swiftbox.verify import engine_fit
    from swiftbox.verify.report import Report

    cpu = CpuPlatform()
    assert fit.quantization_fit("fake_q", "builtin", cpu) == (True, "fake_q on builtin (cpu)", "loads here")
    assert not fit.quantization_fit("fake_q", "vllm", Platform())[0]       # vllm is not among its engines
    quant_methods.METHODS["fake4"] = replace(FAKE, engines=("builtin", "vllm"))
    assert fit.quantization_fit("fake_q", "vllm", Platform())[0]           # a platform that narrows nothing
    assert not fit.quantization_fit("fake_q", "vllm", cpu)[0]              # vLLM-CPU serves no quantized format
    report = Report("x", "builtin")
    engine_fit.check_quantization(report, "fake_q", "builtin", cpu)
    assert [(c.name, c.status) for c in report.checks] == [("fake_q on builtin (cpu)", "ok")]
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fake_q"}}))
    assert fit.artifact_problems(str(folder), "builtin", cpu) == []
    assert fit.artifact_problems(str(folder), "vllm", cpu)                 # the menu greys vLLM out


def test_the_menu_offers_it_with_its_bits(fake, tmp_path, monkeypatch):
    from menus.device_info import menu_features
    from menus.flows import FLOWS, run_flow

    assert "fake4" in menu_features()
    session = make_session(tmp_path, DeviceFacts(**{**FACTS.__dict__, "refusals": {}}))
    # model, method (the sixth: after gptq awq bnb fp8 gguf), bits (the second: 4), dataset, output, run
    with keys(monkeypatch, [ENTER, DOWN * 5 + ENTER, DOWN + ENTER, ENTER, ENTER, ENTER]):
        outcome = run_flow(session, FLOWS["quantize"])
    assert outcome.recipe["steps"] == [{"quantize": {"method": "fake4", "bits": 4}}]


def test_the_menu_greys_it_out_by_its_capability(fake, tmp_path, monkeypatch):
    from menus.flows import FLOWS, run_flow

    refused = {m: f"{m} is not available here" for m in quant_methods.features()}
    session = make_session(tmp_path, DeviceFacts(**{**FACTS.__dict__, "refusals": refused}))
    with keys(monkeypatch, [ENTER, ENTER, ESC]):   # model, method: every one greyed, Enter can only take Back; Esc
        assert run_flow(session, FLOWS["quantize"]) is BACK


def test_the_step_dispatches_to_a_whole_step_writer(fake, tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.pipelines import quantize
    from swiftbox.steps import QuantizeStep

    quant_methods.METHODS["fake4"] = replace(FAKE, writer=f"{__name__}:_whole_step", whole_step=True)
    cfg = QuantizeStep(method="fake4", bits=4)
    quantize.check(cfg, CpuPlatform(), "toy")   # a whole-step writer checks its own input
    ctx = type("Ctx", (), {"platform": CpuPlatform(), "input": "toy", "work_dir": tmp_path})()
    assert quantize.run(cfg, ctx).metrics == {"bits": 4}
    assert CALLS == ["fake4 step"]


@pytest.mark.slow   # two toy loads, perplexity and the probe: ~15 s on 2 idle cores
def test_the_gated_flow_calls_its_writer_and_records_its_loaders(fake, tmp_path, toy_dir):
    """The whole quantize step on the toy: check, the writer from the record, the layout inspection, the gate with
    the record's tolerances, and the manifest's loaders as the record lists them (those importable here)."""
    import swiftbox as sb

    out = tmp_path / "fake"
    result = sb.quantize(str(toy_dir), output=str(out), method="fake4", bits=4, samples=8, max_length=32)
    assert CALLS == ["fake4"]
    metrics = result["metrics"]
    assert metrics["quantized_modules"] == metrics["linear_modules"] > 0 and metrics["cosine_mean"] > 0.999
    quantization = json.loads((out / "swiftbox.json").read_text())["quantization"]
    assert quantization["loads_with"] == ["transformers"] and quantization["tolerances"] == SAME
    assert quantization["tool"] == "copy"
