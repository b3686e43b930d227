"""The menu never offers a choice it will refuse: after the quickstart, Fine-tune greys out the GPTQ
export on its first screen (with the reason), a task the device cannot do is refused before any
question, and a carried-forward output a task cannot take is refused the same way."""
from __future__ import annotations

import json
import os
import time

import pytest
import questionary

from menus import artifacts, main
from menus.device_info import DeviceFacts
from menus.flows import FLOWS, run_flow
from menus.widgets import BACK
from swiftbox.errors import UserError
from tests.conftest import ROOT
from tests.fakes.menu_keys import ENTER, FACTS, keys, make_session

GPTQ_OK = DeviceFacts(**{**FACTS.__dict__, "refusals": {}})


@pytest.fixture(autouse=True)
def _setup(monkeypatch):
    from swiftbox.catalog import presets as registry

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(registry, "PRESETS", ())  # model lists: toy + Other (as in test_menu.py)


def quickstart_runs(runs) -> dict:
    """The artifacts the quickstart leaves, oldest to newest: sft (full model), dpo adapter, merge, quantize."""
    made = {}
    specs = [("sft", {"artifact": "model", "base_model": "toy"}, None),
             ("dpo", {"artifact": "adapter", "base_model": str(runs / "quickstart" / "sft")}, None),
             ("merge", {"artifact": "model"}, None),
             ("quantize", {"artifact": "model", "config": {"method": "gptq", "bits": 4}},
              {"quantization_config": {"quant_method": "gptq", "bits": 4}})]
    for i, (kind, manifest, config) in enumerate(specs):
        folder = runs / "quickstart" / kind
        folder.mkdir(parents=True)
        (folder / "swiftbox.json").write_text(json.dumps({"kind": kind, **manifest}))
        if config:
            (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", **config}))
        stamp = time.time() - 100 + i
        os.utime(folder / "swiftbox.json", (stamp, stamp))
        made[kind] = folder.as_posix()
    return made


def recording_choices(monkeypatch) -> list:
    """Every select's choices, in order (wraps the recording select that keys() installed)."""
    seen: list = []
    inner = questionary.select

    def wrapper(message, choices=None, **kwargs):
        seen.append([(c.title, c.value, c.disabled) for c in choices])
        return inner(message, choices=choices, **kwargs)

    monkeypatch.setattr(questionary, "select", wrapper)
    return seen


def test_finetune_after_the_quickstart_greys_the_gptq_export_and_defaults_to_a_usable_model(tmp_path, monkeypatch):
    made = quickstart_runs(tmp_path / "runs")
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER] * 7):  # model, dataset, method, rank, epochs, output, Run
        screens = recording_choices(monkeypatch)
        outcome = run_flow(session, FLOWS["sft"])
    first = {value: disabled for _title, value, disabled in screens[0]}
    assert "cannot be fine-tuned" in first[made["quantize"]]
    assert first[made["merge"]] is None and first[made["sft"]] is None
    assert outcome.recipe["model"] == made["merge"]  # Enter on the first screen: the newest usable model
    assert session.run.recipes == [outcome.recipe]


def test_the_menu_and_the_pipeline_agree_on_what_cannot_be_fine_tuned(tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import SftStep

    made = quickstart_runs(tmp_path / "runs")
    for found in artifacts.recent(tmp_path / "runs", ("model",)):
        menu_says = artifacts.refusal(found, "sft")
        if menu_says:   # the sft step's check, before any output exists
            with pytest.raises(UserError, match="cannot be fine-tuned"):
                load_pipeline("sft").check(SftStep(dataset="d.jsonl"), CpuPlatform(), str(found.path))
    assert artifacts.refusal(artifacts.describe(made["quantize"]), "sft")


@pytest.mark.parametrize("task,kind,expected", [
    ("merge", "merge", "is not an adapter"), ("merge", "quantize", "is not an adapter"),
    ("quantize", "quantize", "already quantized"), ("quantize", "dpo", "merge it first"),
    ("dpo", "quantize", "cannot be fine-tuned"), ("merge", "dpo", None), ("sft", "merge", None),
    ("eval", "quantize", None), ("serve", "quantize", None),
])
def test_refusal_per_task(tmp_path, task, kind, expected):
    made = quickstart_runs(tmp_path / "runs")
    why = artifacts.refusal(artifacts.describe(made[kind]), task)
    assert (why is None) if expected is None else (expected in why)


def test_a_task_the_device_cannot_do_is_refused_before_any_question(tmp_path, monkeypatch):
    session = make_session(tmp_path)  # FACTS: gptq refused
    with keys(monkeypatch, []) as prompts:
        main.flow(session, "quantize")
    assert prompts == []
    assert session.echoed[-1].startswith("  Quantize: gptq is not available on this cpu")
    assert session.echoed[-1].endswith("Nothing was asked.")
    assert session.run.recipes == []


def test_a_carried_output_the_task_cannot_take_is_refused_before_any_question(tmp_path, monkeypatch):
    made = quickstart_runs(tmp_path / "runs")
    session = make_session(tmp_path, GPTQ_OK)
    with keys(monkeypatch, []) as prompts:
        main.flow(session, "sft", carry=made["quantize"])
    assert prompts == [] and "cannot be fine-tuned" in session.echoed[-1]


def test_next_step_greys_what_the_device_refuses(tmp_path, monkeypatch):
    made = quickstart_runs(tmp_path / "runs")
    session = make_session(tmp_path)  # gptq refused: "Quantize it" is shown but cannot be taken
    with keys(monkeypatch, [ENTER]):
        screens = recording_choices(monkeypatch)
        assert main.next_step(session, "merge", made["merge"]) == "serve"
    offered = {value: disabled for _title, value, disabled in screens[0]}
    assert "gptq is not available" in offered["quantize"]
    assert offered["serve"] is None and offered[BACK] is None


def test_serve_greys_out_an_engine_by_the_engine_fit_rules_serve_applies(tmp_path):
    """The serve flow's engine question reads swiftbox/serving/fit.py, as serve and verify do: a DoRA adapter
    greys out the built-in engine (PEFT cannot pick it per row) and vLLM (no DoRA), each with the reason."""
    from menus.flows import engine_refusal
    from swiftbox.device.cpu import CpuPlatform

    def adapter(name: str, **config) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8,
                                                                "base_model_name_or_path": "toy", **config}))
        return str(folder)

    facts = DeviceFacts(**{**FACTS.__dict__, "refusals": {}, "platform": CpuPlatform()})
    dora, plain = adapter("dora", use_dora=True), adapter("plain")
    assert "DoRA" in (engine_refusal(facts, dora, "builtin") or "")
    assert "DoRA" in (engine_refusal(facts, dora, "vllm") or "")
    assert engine_refusal(facts, plain, "builtin") is None
    assert engine_refusal(facts, "toy", "builtin") is None          # a reference, not a folder: nothing to read
    refused = DeviceFacts(**{**FACTS.__dict__, "refusals": {"vllm": "no vLLM here; use builtin"}})
    assert engine_refusal(refused, plain, "vllm") == "no vLLM here; use builtin"   # the platform's reason first
