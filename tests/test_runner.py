"""The recipe runner: chaining, default outputs, manifests, summary.json, atomic outputs."""
from __future__ import annotations

import json
import sys
import time
import types

import pytest

from swiftbox.artifacts import MANIFEST, read_manifest
from swiftbox.errors import NotBuilt
from swiftbox.pipelines.base import StepResult
from swiftbox.runner import run_recipe


@pytest.fixture
def fake_pipelines(monkeypatch):
    """Replace pipelines with small fakes that record what they were given."""
    calls = []

    def make(kind, produces, fail=False):
        mod = types.ModuleType(f"fake_{kind}")
        mod.PRODUCES_MODEL = produces

        def run(cfg, ctx):
            calls.append((kind, ctx.input, ctx.output.name))
            (ctx.work_dir / "weights.txt").write_text(kind)
            if fail:
                raise RuntimeError("boom in " + kind)
            return StepResult(metrics={"accuracy": 0.5}, info={"artifact": "adapter" if kind == "sft" else "report"})

        mod.run = run
        return mod

    table = {"sft": make("sft", True), "eval": make("eval", False), "merge": make("merge", True),
             "quantize": make("quantize", True, fail=True)}
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: table[kind])
    return calls


def recipe(*steps, name="r"):
    return {"name": name, "model": "toy", "steps": list(steps)}


def test_chaining_outputs_and_summary(tmp_path, fake_pipelines):
    summary = run_recipe(recipe({"eval": {}}, {"sft": {"dataset": "d.jsonl"}}, {"eval": {}}, {"merge": {}}, {"eval": {}}),
                         runs_root=tmp_path)
    root = tmp_path / "r"
    assert [c[0] for c in fake_pipelines] == ["eval", "sft", "eval", "merge", "eval"]
    # eval does not change the chain; sft and merge do
    assert [c[1] for c in fake_pipelines] == ["toy", "toy", str(root / "sft"), str(root / "sft"), str(root / "merge")]
    assert [c[2] for c in fake_pipelines] == ["eval", "sft", "eval-2", "merge", "eval-3"]
    on_disk = json.loads((root / "summary.json").read_text())
    assert on_disk["recipe"] == "r" and on_disk["device"] == "cpu"
    assert [(s["step"], s["ok"]) for s in on_disk["steps"]] == [(k, True) for k in ["eval", "sft", "eval", "merge", "eval"]]
    manifest = read_manifest(root / "sft")
    assert manifest["kind"] == "sft" and manifest["input"] == "toy" and manifest["artifact"] == "adapter"
    assert manifest["config"]["dataset"] == "d.jsonl" and manifest["dtype"] == "float32"
    assert manifest["versions"]["torch"] and manifest["metrics"] == {"accuracy": 0.5}
    assert summary["steps"][1]["metrics"]["accuracy"] == 0.5


def test_failed_step_leaves_no_finished_looking_output(tmp_path, fake_pipelines):
    with pytest.raises(RuntimeError):
        run_recipe(recipe({"sft": {"dataset": "d"}}, {"quantize": {}}), runs_root=tmp_path)
    root = tmp_path / "r"
    assert (root / "sft" / MANIFEST).is_file()
    assert not (root / "quantize").exists()          # never renamed into place
    assert not (root / "quantize.partial" / MANIFEST).exists()
    steps = json.loads((root / "summary.json").read_text())["steps"]
    assert steps[-1]["ok"] is False and "boom in quantize" in steps[-1]["error"]


def test_rerun_replaces_owned_outputs_but_refuses_user_outputs(tmp_path, fake_pipelines):
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)
    first = read_manifest(tmp_path / "r" / "sft")["timings"]["started"]
    time.sleep(0.01)
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)   # default output: replaced
    assert read_manifest(tmp_path / "r" / "sft")["timings"]["started"] != first
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("keep me")
    from swiftbox.errors import UserError

    with pytest.raises(UserError, match="force"):
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(mine)}}), runs_root=tmp_path)
    assert (mine / "precious.txt").read_text() == "keep me"
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(mine), "force": True}}), runs_root=tmp_path)
    assert not (mine / "precious.txt").exists() and (mine / MANIFEST).is_file()


def test_api_key_is_redacted_in_manifest(tmp_path, monkeypatch):
    mod = types.ModuleType("fake_serve")
    mod.PRODUCES_MODEL = False
    mod.run = lambda cfg, ctx: {}
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: mod)
    run_recipe(recipe({"serve": {"api_key": "sk-secret", "smoke": True}}), runs_root=tmp_path)
    text = (tmp_path / "r" / "serve" / MANIFEST).read_text()
    assert "sk-secret" not in text and "***" in text


def test_unbuilt_pipeline_fails_plainly(tmp_path, monkeypatch):
    from swiftbox import pipelines

    monkeypatch.setitem(sys.modules, "swiftbox.pipelines.chat", None)  # import of it fails like a missing module
    with pytest.raises((NotBuilt, ImportError)):
        pipelines.load_pipeline("chat")
