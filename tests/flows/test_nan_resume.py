"""No silent NaN model and resume that cannot overshoot (issue 20): a non-finite training loss stops the step
(exit 1, nothing committed), merge refuses NaN weights, a truncated trainer_state.json is not a checkpoint,
resume never trains past max_steps, and checkpoints outlive everything until the output is committed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from swiftbox.errors import SwiftboxError
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")


def test_non_finite_loss_stops_the_step_and_commits_nothing(tmp_path):
    """`lora.alpha: inf` is refused by the schema now; forced past it, the loss guard is the second wall
    (before: all-NaN weights, train_loss reported 0 by transformers' NaN filter, exit 0)."""
    from swiftbox.recipe import Recipe, RecipeHeader, Step
    from swiftbox.runner import run_recipe
    from swiftbox.steps import LoraConfig, SftStep
    from swiftbox.training.callbacks import Diverged

    out = tmp_path / "adapter"
    cfg = SftStep(model="toy", dataset=SFT_DATA + "#8", max_steps=3, batch_size=4, logging_steps=1, output=str(out))
    cfg = cfg.model_copy(update={"lora": LoraConfig.model_construct(rank=8, alpha=math.inf, dropout=0.0,
                                                                    targets="all-linear")})
    recipe = Recipe(header=RecipeHeader(name="nan"), steps=[Step("sft", cfg, 0)], source="test")
    with pytest.raises(Diverged) as err:
        run_recipe(recipe, runs_root=tmp_path / "runs", log=lambda m: None)
    assert err.value.exit_code == 1 and "nan" in str(err.value) and "at step 1" in str(err.value)
    assert not out.exists()


def test_merge_refuses_nan_adapter(tmp_path, toy_dir):
    from safetensors.torch import load_file, save_file

    from swiftbox.runner import run_step
    from tests.support.serve_fixtures import make_adapter

    adapter = make_adapter(toy_dir, tmp_path / "a", seed=1)
    weights = load_file(adapter / "adapter_model.safetensors")
    first_b = next(k for k in weights if "lora_B" in k)
    weights[first_b][0, 0] = float("nan")
    save_file(weights, adapter / "adapter_model.safetensors")
    out = tmp_path / "merged"
    with pytest.raises(SwiftboxError) as err:          # before: "verified" (NaN > tol is False) and committed
        run_step("merge", {"model": str(adapter), "output": str(out)}, runs_root=tmp_path / "runs", log=lambda m: None)
    assert err.value.exit_code == 1 and "nothing was written" in str(err.value)
    assert not out.exists()


# -- resume ------------------------------------------------------------------------------------------------

def _checkpoint(root: Path, step: int, state: str | None, max_steps: int = 10) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"x")
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def _state(step: int, max_steps: int = 10) -> str:
    return json.dumps({"global_step": step, "max_steps": max_steps, "log_history": []})


def test_truncated_trainer_state_is_not_a_checkpoint(tmp_path):
    from swiftbox.training.checkpoints import last_complete

    good = _checkpoint(tmp_path, 2, _state(2))
    truncated = _checkpoint(tmp_path, 4, _state(4)[:17])       # a kill in the middle of writing it
    empty = _checkpoint(tmp_path, 6, "")
    missing = _checkpoint(tmp_path, 8, None)
    assert last_complete(tmp_path) == good                      # before: checkpoint-6, and every resume crashed
    assert not truncated.exists() and not empty.exists() and not missing.exists()


def test_resume_never_starts_from_the_final_step(tmp_path):
    from types import SimpleNamespace

    from swiftbox.training.checkpoints import resume_point

    _checkpoint(tmp_path, 5, _state(5, 10))
    _checkpoint(tmp_path, 10, _state(10, 10))
    said = []
    assert resume_point(SimpleNamespace(resume=True), tmp_path, said.append) == str(tmp_path / "checkpoint-5")
    assert "last step" in said[0]
    assert resume_point(SimpleNamespace(resume=False), tmp_path, said.append) is None


@pytest.mark.slow
def test_kill_before_commit_then_resume_ends_at_max_steps(tmp_path, monkeypatch):
    """A kill after the final save but before the commit: the checkpoints are still there (they were deleted
    before the commit, forcing a full retrain), and resuming ends at max_steps (was 41/40) with the weights
    the finished run had."""
    import torch
    from safetensors.torch import load_file

    from swiftbox import runner
    from swiftbox.runner import run_step

    out = tmp_path / "a"
    cfg = {"model": "toy", "dataset": SFT_DATA + "#24", "max_steps": 4, "save_steps": 2, "batch_size": 4,
           "logging_steps": 1, "output": str(out)}

    def killed(work, output):
        raise KeyboardInterrupt("kill -9 between the final save and the commit")

    monkeypatch.setattr(runner, "commit_output", killed)
    with pytest.raises(KeyboardInterrupt):
        run_step("sft", cfg, runs_root=tmp_path / "runs", log=lambda m: None)
    monkeypatch.undo()
    ckpts = out.with_name("a.partial") / "checkpoints"
    assert (ckpts / "checkpoint-4" / "trainer_state.json").is_file() and not out.exists()
    finished = load_file(ckpts / "checkpoint-4" / "adapter_model.safetensors")

    entry = run_step("sft", {**cfg, "resume": True}, runs_root=tmp_path / "runs", log=lambda m: None)
    assert entry["metrics"]["steps"] == 4 and entry["metrics"]["resumed_from_step"] == 2
    resumed = load_file(out / "adapter_model.safetensors")
    assert finished.keys() == resumed.keys()
    for key in finished:
        torch.testing.assert_close(resumed[key], finished[key], rtol=1e-5, atol=1e-6)
    assert not (out / "checkpoints").exists()          # removed once the output was committed
