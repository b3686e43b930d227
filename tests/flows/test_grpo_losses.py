"""GRPO loss variants chosen by one field: every loss_type swiftbox offers runs a step on the toy with the TRL
settings it stands for, the installed TRL offers each, and an unknown value or an impossible clip range is one
line, exit 2."""
from __future__ import annotations

import math

import pytest

from swiftbox import cli
from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe
from swiftbox.steps import GRPO_LOSSES, GrpoStep
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_offered_loss_is_one_the_installed_trl_has():
    from swiftbox.pipelines.grpo import loss_settings, trl_loss_types

    offered = trl_loss_types()
    assert {"grpo", "dapo", "dr_grpo", "bnpo"} <= offered, "TRL's GRPOConfig help no longer lists its loss types"
    assert {loss_settings(GrpoStep(dataset="x", loss_type=t))["loss_type"] for t in GRPO_LOSSES} <= offered


def test_one_field_picks_the_papers_settings():
    from swiftbox.pipelines.grpo import loss_settings

    gspo = loss_settings(GrpoStep(dataset="x", loss_type="gspo"))
    assert gspo["loss_type"] == "grpo" and gspo["importance_sampling_level"] == "sequence"
    assert (gspo["epsilon"], gspo["epsilon_high"]) == (3e-4, 4e-4)
    assert loss_settings(GrpoStep(dataset="x", loss_type="luspo"))["importance_sampling_level"] == "sequence"
    assert loss_settings(GrpoStep(dataset="x", loss_type="dr_grpo"))["scale_rewards"] == "none"
    dapo = loss_settings(GrpoStep(dataset="x", epsilon_high=0.28, mask_truncated_completions=True))
    assert dapo == {"loss_type": "dapo", "importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.28,
                    "scale_rewards": "group", "mask_truncated_completions": True}
    assert loss_settings(GrpoStep(dataset="x", loss_type="dr_grpo", scale_rewards="batch"))["scale_rewards"] == "batch"


@pytest.mark.parametrize("loss", GRPO_LOSSES)
def test_each_loss_trains_a_step_on_the_toy(loss, tmp_path):
    grpo = {"dataset": SFT_DATA + "#4", "rewards": ["exact"], "num_generations": 2, "batch_size": 4, "max_steps": 1,
            "max_completion_length": 3, "logging_steps": 1, "save_steps": 100, "loss_type": loss}
    summary = run_recipe({"name": "g", "model": "toy", "steps": [{"grpo": grpo}]}, runs_root=tmp_path,
                         log=lambda m: None)
    metrics = summary["steps"][0]["metrics"]
    assert metrics["steps"] == 1 and math.isfinite(metrics["train_loss"])
    from swiftbox.pipelines.grpo import loss_settings

    manifest = read_manifest(tmp_path / "g" / "grpo")
    assert manifest["grpo_loss"] == loss_settings(GrpoStep(**grpo))


@pytest.mark.parametrize("argv,word", [
    (["--loss-type", "ppo"], "loss_type"),
    (["--scale-rewards", "always"], "scale_rewards"),
    (["--epsilon", "0"], "epsilon"),
    (["--epsilon", "0.3", "--epsilon-high", "0.2"], "epsilon_high"),
])
def test_bad_loss_settings_are_one_line_exit_2(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["grpo", "toy", "--dataset", SFT_DATA, *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and word in err, err
    assert not list(tmp_path.rglob("*.partial"))
