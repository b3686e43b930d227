"""The step contract without exceptions (issue 44 item 2): every refusal that depends on the step's input is raised
by its check - for EVERY step kind, before `<out>` or `<out>.partial` exists - and what check resolved (merge's
adapter chain and dtypes, serve's engine, gate and key) reaches run as `ctx.plan`, resolved once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from swiftbox.errors import SwiftboxError
from swiftbox.runner import run_step
from swiftbox.steps import STEP_TYPES
from tests.support.adapters import PARITY_SFT, shared_adapter

BROKEN = "@broken"     # an adapter whose base model does not exist: no step can take it


def _broken_adapter(root: Path) -> Path:
    path = root / "broken-adapter"
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "base_model_name_or_path": str(root / "no-such-base"), "r": 4, "lora_alpha": 8,
        "target_modules": ["q_proj"]}))
    (path / "adapter_model.safetensors").write_bytes(b"")
    return path


# kind -> (its config, the model it starts from, the exit code of its refusal): one row per step kind
REFUSED: dict[str, tuple[dict, str, int]] = {
    **{kind: ({"dataset": PARITY_SFT}, BROKEN, 2) for kind in ("sft", "pt", "dpo", "kto", "orpo", "simpo", "rm",
                                                                "grpo")},
    "gkd": ({"dataset": PARITY_SFT, "teacher": "toy"}, BROKEN, 2),
    "merge": ({}, BROKEN, 2),                                   # the chain cannot resolve: no base
    "quantize": ({}, BROKEN, 2),                                # an adapter: merge first
    "serve": ({}, BROKEN, 2),                                   # the pre-deploy gate fails the files
    "chat": ({"prompt": "hi"}, BROKEN, 2),
    "eval": ({"dataset": PARITY_SFT}, BROKEN, 2),               # the model cannot be resolved
    "verify": ({}, "/no/such/artifact", 2),
    "download": ({"source": "local"}, "/no/such/model", 2),
}


def test_the_refusal_table_covers_every_step_kind():
    assert set(REFUSED) == set(STEP_TYPES), "a new step kind needs its row in REFUSED"


@pytest.fixture
def no_output_written(monkeypatch):
    """Fails the test if the runner gets as far as making the step's output (the refusal came too late)."""
    def reached(output, **_):
        raise AssertionError(f"prepare_output({output}) reached: the refusal must come from check")

    monkeypatch.setattr("swiftbox.runner.prepare_output", reached)


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_an_input_the_step_cannot_take_is_refused_before_its_output_exists(kind, tmp_path, no_output_written):
    config, model, code = REFUSED[kind]
    model = str(_broken_adapter(tmp_path)) if model == BROKEN else model
    runs = tmp_path / "runs"
    with pytest.raises(SwiftboxError) as refused:
        run_step(kind, {"model": model, **config}, runs_root=runs, device="cpu")
    assert refused.value.exit_code == code, str(refused.value)
    assert "\n" not in str(refused.value)                          # one line
    assert not [p for p in runs.rglob("*") if p.name.startswith(kind)]   # no <out>, no <out>.partial


def test_serve_refuses_an_engine_this_platform_lacks_in_check(tmp_path, no_output_written, no_vllm_cpu):
    with pytest.raises(SwiftboxError) as refused:
        run_step("serve", {"model": "toy", "engine": "vllm"}, runs_root=tmp_path, device="cpu")
    assert refused.value.exit_code == 3 and "vllm" in str(refused.value)
    assert not list(tmp_path.rglob("serve*"))


def test_serve_exposure_is_refused_in_check(tmp_path, no_output_written, monkeypatch):
    monkeypatch.delenv("SWIFTBOX_API_KEY", raising=False)
    with pytest.raises(SwiftboxError, match="0.0.0.0") as refused:
        run_step("serve", {"model": "toy", "host": "0.0.0.0"}, runs_root=tmp_path, device="cpu")
    assert refused.value.exit_code == 2


def test_merge_resolves_its_chain_once_and_the_runner_alone_writes_its_dtype(tmp_path, monkeypatch):
    from swiftbox.pipelines import merge

    resolved: list[list[str]] = []
    real = merge.adapter_chain

    def counted(refs, base):
        resolved.append(list(refs))
        return real(refs, base)

    monkeypatch.setattr(merge, "adapter_chain", counted)
    adapter = shared_adapter("lora")
    entry = run_step("merge", {"model": str(adapter)}, runs_root=tmp_path, device="cpu")
    assert resolved == [[str(adapter)]]                 # check resolved it; run read ctx.plan
    manifest = json.loads((Path(entry["output"]) / "swiftbox.json").read_text())
    assert manifest["merged_from"] == [str(adapter)]
    assert manifest["dtype"] == manifest["dtype_plan"]["save"] == "float32"   # toy is float32: saved in it
    assert manifest["compute_dtype"] == manifest["dtype_plan"]["compute"] == "float32"


def test_a_step_run_without_its_plan_does_not_resolve_it_again(tmp_path):
    """merge.run reads the chain from ctx.plan; with none it stops (a programming error), it never re-resolves."""
    from swiftbox.contract import StepContext
    from swiftbox.device import current_platform
    from swiftbox.pipelines import merge
    from swiftbox.steps import MergeStep

    ctx = StepContext(recipe="r", kind="merge", index=0, input=str(shared_adapter("lora")), work_dir=tmp_path / "w",
                      output=tmp_path / "o", platform=current_platform("cpu"))
    with pytest.raises(TypeError, match="MergePlan"):
        merge.run(MergeStep(), ctx)


def test_serve_picks_and_gates_its_engine_once_in_check(tmp_path, monkeypatch):
    """The engine choice, the pre-deploy gate and the exposure rule each run once, in check; run opens the planned
    engine (smoke: one question through the openai client) and never chooses again."""
    import swiftbox.verify
    from swiftbox.pipelines import serve

    calls: dict[str, int] = {"engine": 0, "gate": 0, "exposure": 0}

    def counted(name, real):
        def call(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return call

    def chosen_again(*a, **k):
        raise AssertionError("the engine was chosen again after check")

    monkeypatch.setattr(serve, "plan_engine", counted("engine", serve.plan_engine))
    monkeypatch.setattr(swiftbox.verify, "startup_gate", counted("gate", swiftbox.verify.startup_gate))
    monkeypatch.setattr(serve, "check_exposure", counted("exposure", serve.check_exposure))
    monkeypatch.setattr("swiftbox.serving.launch.pick_engine", chosen_again, raising=False)  # open_backend's fallback
    entry = run_step("serve", {"model": "toy", "smoke": True, "port": 0, "api_key": "k1", "engine": "builtin"},
                     runs_root=tmp_path, device="cpu")
    assert calls == {"engine": 1, "gate": 1, "exposure": 1}
    assert entry["metrics"]["engine"] == "builtin"


@pytest.mark.parametrize("kind", ["sft", "dpo", "grpo"])
def test_a_dataset_file_that_is_not_there_is_refused_in_check(kind, tmp_path, no_output_written):
    with pytest.raises(SwiftboxError, match="missing.jsonl: file not found") as refused:
        run_step(kind, {"model": "toy", "dataset": str(tmp_path / "missing.jsonl")}, runs_root=tmp_path,
                 device="cpu")
    assert refused.value.exit_code == 2


def test_serve_backend_is_refused_naming_engine():
    """`backend` was an undocumented second name of serve's `engine`: refused in one line naming `engine`."""
    from swiftbox.errors import UserError
    from swiftbox.recipe import load_recipe

    with pytest.raises(UserError, match=r"backend: not a serve setting.*engine: auto\|builtin\|vllm") as refused:
        load_recipe({"name": "r", "model": "toy", "steps": [{"serve": {"backend": "vllm"}}]})
    assert "\n" not in str(refused.value)


def test_a_torchrun_worker_gets_the_runners_plan(tmp_path):
    """The launch spec carries the plan's dtypes and manifest dtype; a worker's ctx.plan is the runner's, not a
    second planning."""
    from swiftbox.contract import Plan, StepContext
    from swiftbox.device import current_platform
    from swiftbox.device.dtype_policy import DtypePlan
    from swiftbox.steps import SftStep
    from swiftbox.training.distributed.launch import write_spec
    from swiftbox.training.distributed.worker import build, load_spec

    plan = Plan(dtypes=DtypePlan("bfloat16", save="float32", note="adapter weights"), dtype="bfloat16")
    ctx = StepContext(recipe="r", kind="sft", index=0, input="toy", work_dir=tmp_path, output=tmp_path / "o",
                      platform=current_platform("cpu"), plan=plan)
    write_spec(tmp_path / "launch.json", SftStep(dataset=PARITY_SFT), ctx, pipeline="swiftbox.pipelines.sft")
    _, rebuilt = build(load_spec(str(tmp_path / "launch.json")))
    assert rebuilt.plan == plan
