"""The recipe runner: chaining, default outputs, manifests, summary.json, atomic outputs."""
from __future__ import annotations

import json
import time

import pytest

from swiftbox.artifacts import MANIFEST, read_manifest
from swiftbox.contract import StepResult, declare
from swiftbox.errors import Unsupported
from swiftbox.pipelines import load_pipeline
from swiftbox.runner import run_recipe
from swiftbox.steps import STEP_TYPES
from tests.fakes.pipelines import recipe


@pytest.mark.parametrize(("bf16", "dtype"), [("off", "float32"), ("on", "bfloat16")])
def test_chaining_outputs_and_summary(tmp_path, fake_pipelines, monkeypatch, capsys, bf16, dtype):
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", bf16)     # the dtype each step computes in follows the CPU kind
    summary = run_recipe(recipe({"eval": {}}, {"sft": {"dataset": "d.jsonl"}}, {"eval": {}}, {"merge": {}},
                                {"eval": {}}), runs_root=tmp_path)
    assert f"[2/5] sft <- toy  (device cpu; compute {dtype})" in capsys.readouterr().err   # the step header says it
    root = tmp_path / "r"
    assert [c[0] for c in fake_pipelines] == ["eval", "sft", "eval", "merge", "eval"]
    # eval does not change the chain; sft and merge do
    assert [c[1] for c in fake_pipelines] == ["toy", "toy", str(root / "sft"), str(root / "sft"), str(root / "merge")]
    assert [c[2] for c in fake_pipelines] == ["eval", "sft", "eval-2", "merge", "eval-3"]
    on_disk = json.loads((root / "summary.json").read_text())
    assert on_disk["recipe"] == "r" and on_disk["device"] == "cpu"
    kinds = ["eval", "sft", "eval", "merge", "eval"]
    assert [(s["step"], s["ok"]) for s in on_disk["steps"]] == [(k, True) for k in kinds]
    manifest = read_manifest(root / "sft")
    assert manifest["kind"] == "sft" and manifest["input"] == "toy" and manifest["artifact"] == "adapter"
    assert manifest["config"]["dataset"] == "d.jsonl" and manifest["dtype"] == dtype
    assert manifest["dtype_plan"] == {"compute": dtype, "save": None, "check": None, "tolerance": None}
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
    with pytest.raises(UserError, match="not a swiftbox output"):     # --force replaces only swiftbox outputs
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(mine), "force": True}}), runs_root=tmp_path)
    assert (mine / "precious.txt").read_text() == "keep me"
    ours = tmp_path / "ours"
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(ours)}}), runs_root=tmp_path)
    with pytest.raises(UserError, match="force"):
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(ours)}}), runs_root=tmp_path)
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(ours), "force": True}}), runs_root=tmp_path)
    assert (ours / MANIFEST).is_file()


def test_api_key_is_redacted_in_manifest(tmp_path, monkeypatch):
    from swiftbox.steps import ServeStep

    fake = declare("serve", ServeStep, produces_model=False, run=lambda cfg, ctx: StepResult())
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: fake)
    run_recipe(recipe({"serve": {"api_key": "sk-secret", "smoke": True}}), runs_root=tmp_path)
    text = (tmp_path / "r" / "serve" / MANIFEST).read_text()
    assert "sk-secret" not in text and "***" in text


def test_a_refusal_leaves_nothing_on_disk(tmp_path, monkeypatch):
    """check() runs before the output directory exists: a refused step leaves no <out>.partial behind."""
    from swiftbox.steps import SftStep

    def check(cfg, platform, input):
        raise Unsupported("qlora-bnb is not available here; use lora instead")

    def run(cfg, ctx):
        raise AssertionError("run must not be reached")

    fake = declare("sft", SftStep, produces_model=True, check=check, run=run)
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: fake)
    with pytest.raises(Unsupported):
        run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["summary.json"]


def test_a_run_that_returns_no_step_result_fails_the_step(tmp_path, monkeypatch):
    from swiftbox.errors import SwiftboxError
    from swiftbox.steps import EvalStep

    fake = declare("eval", EvalStep, produces_model=False, run=lambda cfg, ctx: {"accuracy": 1.0})
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: fake)
    with pytest.raises(SwiftboxError, match="not a StepResult"):
        run_recipe(recipe({"eval": {}}), runs_root=tmp_path)
    assert not (tmp_path / "r" / "eval").exists()


@pytest.mark.parametrize("kind", list(STEP_TYPES))
def test_every_step_kind_has_its_pipeline(kind):
    """The registry is the step schemas: each kind's module declares PIPELINE with that schema."""
    pipeline = load_pipeline(kind)
    assert pipeline.kind == kind and pipeline.schema is STEP_TYPES[kind]
    assert pipeline.produces_model == (kind in ("download", "sft", "pt", "dpo", "kto", "orpo", "simpo", "merge",
                                               "quantize", "grpo", "gkd"))


def test_qlora_is_refused_before_the_output_exists(tmp_path):
    """The real sft check on a platform without bitsandbytes' 4-bit (simulated NPU): exit 3, nothing on disk."""
    from swiftbox.device import NpuPlatform

    pipeline = load_pipeline("sft")
    with pytest.raises(Unsupported, match="lora"):
        pipeline.check(STEP_TYPES["sft"](dataset="d.jsonl", method="qlora"), NpuPlatform(), "toy")


def test_a_step_names_an_earlier_steps_model_with_at(tmp_path, fake_pipelines):
    """`model: "@sft"` is the first sft's output and `@sft-2` the second's, wherever --runs-root put them; the chain
    of steps without model: is unchanged."""
    run_recipe(recipe({"sft": {"dataset": "a.jsonl"}}, {"sft": {"dataset": "b.jsonl"}},
                      {"merge": {"model": "@sft"}}, {"eval": {"model": "@sft-2"}}, {"eval": {}}), runs_root=tmp_path)
    root = tmp_path / "r"
    assert [c[1] for c in fake_pipelines] == ["toy", str(root / "sft"), str(root / "sft"), str(root / "sft-2"),
                                              str(root / "merge")]


@pytest.mark.parametrize(("steps", "named"), [
    ([{"eval": {"model": "@sft"}}, {"sft": {"dataset": "a.jsonl"}}], "@sft: not an earlier step"),   # later
    ([{"sft": {"dataset": "a.jsonl"}}, {"eval": {}}, {"sft": {"model": "@eval", "dataset": "a.jsonl"}}],
     "@eval: not an earlier step that produces a model (those before it: @sft)"),                     # no model
    ([{"sft": {"dataset": "a.jsonl"}}, {"merge": {"model": "@sft-2"}}], "@sft-2"),                      # no second
])
def test_an_at_reference_to_no_earlier_model_is_refused_before_any_step_runs(tmp_path, fake_pipelines, steps, named):
    from swiftbox.errors import UserError

    with pytest.raises(UserError, match=named.replace("(", r"\(").replace(")", r"\)")):
        run_recipe(recipe(*steps), runs_root=tmp_path)
    assert fake_pipelines == [] and not (tmp_path / "r" / "sft").exists()


def test_check_sees_the_input_the_step_will_start_from(tmp_path, monkeypatch):
    """check(cfg, platform, input) gets the resolved input: the recipe's model, then an earlier step's output."""
    from swiftbox.steps import EvalStep, SftStep

    seen = []

    def run(cfg, ctx):
        (ctx.work_dir / "weights.txt").write_text("x")
        return StepResult()

    table = {"sft": declare("sft", SftStep, produces_model=True, run=run,
                            check=lambda cfg, platform, input: seen.append(("sft", input))),
             "eval": declare("eval", EvalStep, produces_model=False, run=run,
                             check=lambda cfg, platform, input: seen.append(("eval", input)))}
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: table[kind])
    run_recipe(recipe({"sft": {"dataset": "a.jsonl"}}, {"eval": {}}, {"eval": {"model": "@sft"}}), runs_root=tmp_path)
    sft = str(tmp_path / "r" / "sft")
    assert seen == [("sft", "toy"), ("eval", sft), ("eval", sft)]


def _model_dir(path, **config):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("make,step,cls,words", [
    (lambda d: _model_dir(d, model_type="qwen2", quantization_config={"quant_method": "gptq"}), {},
     "UserError", "gptq-quantized export cannot be fine-tuned"),
    (lambda d: _model_dir(d, model_type="mistral3"), {}, "Unsupported", "cannot be trained here"),
    (lambda d: _model_dir(d, model_type="jamba"), {"packing": True}, "UserError",
     "packing: true on jamba"),
])
def test_input_dependent_refusals_come_before_the_output_exists(tmp_path, make, step, cls, words):
    """The real sft step: what the input model cannot take is refused by check, so no <out>.partial is made."""
    from swiftbox.errors import SwiftboxError

    model = make(tmp_path / "model")
    with pytest.raises(SwiftboxError) as err:
        run_recipe({"name": "r", "model": model, "steps": [{"sft": {"dataset": "d.jsonl", **step}}]},
                   runs_root=tmp_path / "runs")
    assert type(err.value).__name__ == cls and words in str(err.value)
    assert [p.name for p in (tmp_path / "runs" / "r").iterdir()] == ["summary.json"]


def test_a_new_lora_init_on_a_continued_adapter_is_refused_before_the_output_exists(tmp_path):
    from swiftbox.errors import UserError

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "toy", "r": 8}))
    with pytest.raises(UserError, match="lora.init pissa: the input .* is an adapter"):
        run_recipe({"name": "r", "model": str(adapter),
                    "steps": [{"sft": {"dataset": "d.jsonl", "lora": {"init": "pissa"}}}]}, runs_root=tmp_path)
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["summary.json"]


@pytest.mark.parametrize("step,words", [({"merge": {}}, "merge: toy is a model"),
                                        ({"quantize": {"method": "bnb"}}, None)])
def test_merge_and_quantize_refuse_their_input_before_the_output_exists(tmp_path, step, words):
    """merge's adapter chain and quantize's input are checked by check(): no <out>.partial is made."""
    from swiftbox.errors import SwiftboxError

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "toy", "r": 8}))
    model = "toy" if "merge" in step else str(adapter)
    with pytest.raises(SwiftboxError) as err:
        run_recipe({"name": "r", "model": model, "steps": [step]}, runs_root=tmp_path / "runs")
    assert (words or "is an adapter, not a full model; merge first") in str(err.value)
    assert [p.name for p in (tmp_path / "runs" / "r").iterdir()] == ["summary.json"]
